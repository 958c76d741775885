"""A user's first hour, through the real command line in a subprocess (exit codes and stderr are
what a user sees): no lost work, no false causes, no tracebacks, feedback while it runs.

This file holds the tests that start child processes, compile with inductor or drive the browser;
the others are in tests/unit/test_first_hour.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pytest
import torch

from guardscope import CorpusWriter

from ..conftest import REPO, model_spec

pytestmark = pytest.mark.slow


def guardscope(*arguments: str, cwd=None, env=None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "guardscope.cli", *map(str, arguments)], capture_output=True,
                          text=True, cwd=cwd, env=environment, timeout=600)


def test_help_imports_no_torch():
    code = ("import sys; from click.testing import CliRunner; from guardscope.cli import main; "
            "result = CliRunner().invoke(main, ['--help']); assert result.exit_code == 0; "
            "result = CliRunner().invoke(main, ['analyze', '--help']); assert result.exit_code == 0; "
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_a_model_that_raises_on_a_tenth_of_its_samples(tmp_path):
    generator = torch.Generator().manual_seed(0)
    with CorpusWriter(tmp_path / "corpus", model=model_spec("Fails"), compile={"dynamic": None}) as writer:
        for index in range(100):
            x = torch.rand(3 + index % 7, generator=generator) + 0.1
            writer.add(-x if index % 10 == 3 else x)
    done = guardscope("analyze", tmp_path / "corpus", "--out", tmp_path / "out", "-q")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "10 of 100 samples raised" in done.stderr and "ValueError: negative input" in done.stderr
    assert "recompile limit" not in done.stderr  # no cause that was not measured
    catalog = json.loads((tmp_path / "out" / "catalog.json").read_text())
    assert len(catalog["failed_samples"]) == 10
    assert sum(t["count"] for t in catalog["topologies"]) == 90
    accepted = guardscope("analyze", tmp_path / "corpus", "--out", tmp_path / "out", "-q", "--force", "--accept-errors")
    assert accepted.returncode == 0, accepted.stderr


def test_an_empty_corpus_is_an_error(tmp_path):
    with CorpusWriter(tmp_path / "corpus", model=model_spec("Elementwise")):
        pass
    done = guardscope("analyze", tmp_path / "corpus", "--out", tmp_path / "out")
    assert done.returncode == 2
    assert "holds no samples" in done.stderr and "Traceback" not in done.stderr


def test_ctrl_c_keeps_finished_samples_and_resume_gives_the_same_catalog(tmp_path):
    """SIGINT once 30% of the seed corpus is done (90 of 300 samples, read from the checkpoint
    saved after every sample): the interrupted run keeps what finished, says so, and --resume ends
    byte-identical to an uninterrupted run."""
    import signal
    import time

    from ..conftest import SEED_CORPUS

    reference = guardscope("analyze", SEED_CORPUS, "--out", tmp_path / "reference", "-q")
    assert reference.returncode == 0, reference.stderr
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    # The signal races the replay: from sample 90 on, a busy 2-core machine can finish the last
    # samples before the signal lands (exit 0). Such a run proves nothing either way: try again.
    stderr = "every attempt finished before the signal"
    for attempt in range(3):
        out = tmp_path / f"out{attempt}"
        # A background job of a non-interactive shell (a CI runner's) inherits SIGINT ignored; Ctrl-C
        # reaches a terminal's foreground process, so the child gets the default disposition back.
        process = subprocess.Popen([sys.executable, "-m", "guardscope.cli", "analyze", str(SEED_CORPUS), "--out",
                                    str(out), "--checkpoint-every", "0"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
                                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        checkpoint = out / ".guardscope-checkpoint.json"
        deadline = time.time() + 300
        while time.time() < deadline and process.poll() is None:
            try:
                if json.loads(checkpoint.read_text())["next_sample"] >= 90:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.01)
        if process.poll() is not None:
            continue  # finished before it could be interrupted
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
        if process.returncode != 0:
            break
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    kept = json.loads(checkpoint.read_text())["next_sample"]
    assert 90 <= kept < 300
    assert f"the first {kept} samples are kept" in stderr and "--resume" in stderr
    resumed = guardscope("analyze", SEED_CORPUS, "--out", out, "-q", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert (out / "catalog.json").read_bytes() == (tmp_path / "reference" / "catalog.json").read_bytes()


def test_progress_in_a_log_is_plain_lines(tmp_path):
    from ..conftest import SEED_CORPUS

    done = guardscope("analyze", SEED_CORPUS, "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("replaying ")]
    assert lines and lines[-1].startswith("replaying 300/300 samples (100%), 11 compiles, ETA ")
    assert "\r" not in done.stderr


# --- user errors: one clear line and exit 2, no traceback ---------------------------------------


def assert_user_error(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert any(line.startswith(("error: ", "Error: ")) for line in done.stderr.splitlines()), done.stderr
    for word in words:
        assert word in done.stderr, (word, done.stderr)


@pytest.mark.parametrize("arguments,words", [
    (["--device", "gpu"], ["'gpu' is not a torch device"]),
    (["--mark-unbacked", "y:0"], ["no argument 'y'", "it has: x"]),
    (["--mark-unbacked", "x:5"], ["x has 2 dims", "no dim 5"]),
])
def test_bad_options_are_one_clear_line(small_corpus, tmp_path, arguments, words):
    done = guardscope("analyze", small_corpus, "--out", tmp_path / "out", *arguments)
    assert_user_error(done, *words)
    assert not (tmp_path / "out").exists(), "nothing is written before the options are checked"


def test_read_only_folders_are_one_clear_line(small_corpus, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    out = tmp_path / "readonly"
    out.mkdir()
    out.chmod(0o555)
    try:
        assert_user_error(guardscope("analyze", small_corpus, "--out", out), "cannot write")
    finally:
        out.chmod(0o755)
    analysed = tmp_path / "analysed"
    assert guardscope("analyze", small_corpus, "--out", analysed, "-q").returncode == 0
    analysed.chmod(0o555)
    try:
        assert_user_error(guardscope("emit-warmup", analysed), "cannot")
    finally:
        analysed.chmod(0o755)


def test_an_unwritable_out_is_one_clear_line(small_corpus, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert_user_error(guardscope("analyze", small_corpus, "--out", blocker / "out"), "cannot write", str(blocker))


def test_out_never_replaces_files_guardscope_did_not_write(small_corpus, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "report.html").write_text("my own report")
    (out / "notes.txt").write_text("my notes")
    assert_user_error(guardscope("analyze", small_corpus, "--out", out), "not empty", "--force")
    assert_user_error(guardscope("analyze", small_corpus, "--out", out, "--force"), "report.html", "did not write")
    assert (out / "report.html").read_text() == "my own report"
    (out / "report.html").unlink()
    assert guardscope("analyze", small_corpus, "--out", out, "--force", "-q").returncode == 0
    assert (out / "notes.txt").read_text() == "my notes"
    # The folder is an analysis now: a second analysis replaces only guardscope's own files.
    assert guardscope("analyze", small_corpus, "--out", out, "--force", "-q").returncode == 0
    (out / "warmup.py").write_text("# my warmup, not guardscope's")
    assert_user_error(guardscope("emit-warmup", out), "warmup.py", "not written by guardscope")
    assert (out / "warmup.py").read_text() == "# my warmup, not guardscope's"


def test_output_files_are_readable_as_the_umask_allows(small_corpus, tmp_path):
    import stat

    out = tmp_path / "out"
    done = guardscope("analyze", small_corpus, "--out", out, "-q")
    assert done.returncode == 0, done.stderr
    assert guardscope("emit-warmup", out).returncode == 0
    mask = os.umask(0)
    os.umask(mask)
    for name in ("catalog.json", "report.html", "timings.json", "warmup.py", "fixes.json", "warmup/corpus.json",
                 "trace/torch_trace.log"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o666 & ~mask, name


# --- paths ----------------------------------------------------------------------------------------


def test_paths_are_shown_as_given_and_a_moved_analysis_still_finds_its_corpus(small_corpus, tmp_path):
    import shutil

    out = tmp_path / "out"
    done = guardscope("analyze", small_corpus, "--out", out, "-q")
    assert done.returncode == 0, done.stderr
    assert f"corpus      {small_corpus} (3 samples), model Elementwise (tests/models.py)" in done.stdout
    title = (out / "report.html").read_text().split("<title>")[1].split("</title>")[0]
    assert title == "guardscope report: Elementwise (tests/models.py)"
    # Copied elsewhere without its corpus: the absolute path recorded at analysis time serves.
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(out, copy)
    assert guardscope("emit-warmup", copy).returncode == 0
    # Moved as well: --corpus says where it is; without it, one clear line says to pass it.
    moved = tmp_path / "moved-corpus"
    shutil.move(str(small_corpus), moved)
    assert_user_error(guardscope("verify", copy, "--no-bundle"), "--corpus DIR")
    verified = guardscope("verify", copy, "--no-bundle", "--artifact", "warmup", "--corpus", moved)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_corpus_recorded_with_a_relative_model_path_works_from_anywhere(tmp_path):
    work = tmp_path / "project"
    (work / "app").mkdir(parents=True)
    (work / "app" / "model.py").write_text("import torch\n\n\nclass Net(torch.nn.Module):\n"
                                            "    def forward(self, x):\n        return x.sin()\n")
    code = ("import torch, guardscope\n"
            "with guardscope.CorpusWriter('data/corpus', model='app/model.py:Net') as w:\n"
            "    w.add(torch.randn(4, 3))\n")
    made = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert made.returncode == 0, made.stderr
    manifest = json.loads((work / "data" / "corpus" / "corpus.json").read_text())
    assert manifest["model"] == "../../app/model.py:Net"
    done = guardscope("analyze", work / "data" / "corpus", "--out", tmp_path / "out", "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def test_verify_names_each_fix_and_the_real_path(small_corpus, tmp_path):
    out = tmp_path / "out"
    assert guardscope("analyze", small_corpus, "--out", out, "-q").returncode == 0
    assert guardscope("emit-warmup", out).returncode == 0
    done = guardscope("verify", out, "--no-bundle", "--artifact", "warmup")
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = done.stdout.strip().splitlines()[-1]
    assert verdict == f"verdict     PASSED under inductor (torch.compile's default): warmup passed ({out / 'verification.json'})"


def test_the_runtime_is_reached_from_a_plain_import_as_the_readme_writes_it():
    """Issue 36, item 1: ``import guardscope`` then ``guardscope.runtime.TrafficRecorder`` raised
    AttributeError (it worked only after ``import guardscope.runtime``)."""
    code = ("import sys, guardscope; assert 'torch' not in sys.modules; "
            "print(guardscope.runtime.TrafficRecorder.__name__, guardscope.runtime.serve.__name__, "
            "'runtime' in dir(guardscope))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["TrafficRecorder", "serve", "True"]


def test_verify_names_the_root_cause_when_the_model_s_import_fails(tmp_path):
    """Issue 51, item 7: the environment broke after the analysis (a module the model imports is
    gone), so verify's child cannot import the model. Its result says the root cause, where it was
    raised and what ended the process, a line each, not a traceback flattened onto one line."""
    import guardscope as library
    from guardscope import pipeline

    app = tmp_path / "app"
    app.mkdir()
    (app / "helper_51.py").write_text("import torch\n\n\ndef build():\n    return torch.nn.ReLU()\n")
    (app / "served_51.py").write_text("from helper_51 import build\n")
    with CorpusWriter(tmp_path / "corpus", model=f"{app / 'served_51.py'}:build", compile={"dynamic": True}) as writer:
        for rows in (3, 5, 7):
            writer.add(torch.randn(rows))
    try:
        library.analyze(tmp_path / "corpus", tmp_path / "out")
        pipeline.emit_warmup(tmp_path / "out")
    finally:
        sys.modules.pop("helper_51", None)
    (app / "helper_51.py").unlink()  # the environment breaks
    done = guardscope("verify", tmp_path / "out", "--artifact", "warmup", "--backend", "eager", "--no-bundle")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    crashed = lines.index(next(line for line in lines if line.startswith("warmup    CRASHED")))
    assert lines[crashed + 1:crashed + 3] == [
        "          the verification process exited with status 1: ModuleNotFoundError: No module named 'helper_51'",
        f"          raised at {app / 'served_51.py'}, line 1, in <module>: from helper_51 import build",
    ], done.stdout
    assert lines[crashed + 3].startswith("          which ended the process as guardscope.errors.ModelSpecError: ")
    assert " | " not in done.stdout


_SLOW_MODEL = """
import os
import subprocess
import time

import torch


def build():
    if os.environ.get("GUARDSCOPE_TEST_PIDS"):  # in verify's child: a grandchild, then a long wait
        grandchild = subprocess.Popen(["sleep", "300"])
        with open(os.environ["GUARDSCOPE_TEST_PIDS"], "w") as pids:
            pids.write(f"{os.getpid()} {grandchild.pid}")
        time.sleep(300)
    return torch.nn.ReLU()
"""


def _alive(pid: int) -> bool:
    """The process exists and is no zombie (a container's init may not reap the orphans it adopts)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_verify_s_children_die_with_it(tmp_path):
    """Issue 51, item 6: verify killed (a timeout's SIGTERM, then SIGKILL) while its child works:
    the child and the child's own children (inductor's compile workers, here a sleep) end with it;
    none is left running as an orphan."""
    import signal
    import time

    import guardscope as library
    from guardscope import pipeline

    (tmp_path / "slow_model.py").write_text(_SLOW_MODEL)
    with CorpusWriter(tmp_path / "corpus", model=f"{tmp_path / 'slow_model.py'}:build") as writer:
        for rows in (3, 5):
            writer.add(torch.randn(rows))
    library.analyze(tmp_path / "corpus", tmp_path / "out")
    pipeline.emit_warmup(tmp_path / "out")
    for kill in (signal.SIGTERM, signal.SIGKILL):
        pids_file = tmp_path / f"pids-{kill.name}"
        verify = subprocess.Popen(
            [sys.executable, "-m", "guardscope.cli", "verify", str(tmp_path / "out"), "--artifact", "warmup",
             "--backend", "eager", "--no-bundle"],
            env={**os.environ, "PYTHONPATH": str(REPO), "GUARDSCOPE_TEST_PIDS": str(pids_file)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pids: list[int] = []
        try:
            deadline = time.monotonic() + 120
            while not (pids_file.is_file() and pids_file.read_text()):
                assert time.monotonic() < deadline and verify.poll() is None, "verify's child never started"
                time.sleep(0.1)
            pids = [int(pid) for pid in pids_file.read_text().split()]
            assert all(_alive(pid) for pid in pids)
            verify.send_signal(kill)
            verify.wait(timeout=30)
            deadline = time.monotonic() + 15
            while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not [pid for pid in pids if _alive(pid)], f"left running after {kill.name} of verify"
        finally:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            verify.kill()
            verify.wait()
