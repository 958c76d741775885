"""Background compiles done elsewhere: a child process compiles a fallback topology with the
production backend and hands back torch's compile-cache artifacts (the mega-cache that
``guardscope bundle`` uses); the serving process loads them and pays only a cached compile
(``serve(..., background_compile="process")``).

Why a child, and what it must reproduce. A compile on a thread of the serving process is mostly
Python holding the GIL: the serving thread's eager calls wait for it (the seed article: a 1,580 ms
peak). The expensive part of an inductor compile — AOTAutograd's trace, inductor's lowering, code
generation, the C++/Triton builds — is keyed by torch's FX-graph and AOTAutograd caches on the graph
Dynamo traced, not on the process that traced it. So a child that traces the *same* graph fills
those caches, and the serving process's own compile of that call then hits them: Dynamo's trace
and a cache load, on the background thread, instead of the whole compile.

The same graph needs the same Dynamo state: automatic dynamic shapes make a recompile's graph
depend on the shapes this frame compiled before. The child therefore replays, in order, what the
serving process compiled: the plan's set-up (its warmup, or the unbacked plan's configure,
warmup and marks; the plan's compile-cache bundle when there is one), then every call compiled in
the background so far, then the new call. The calls travel as guardscope corpora of one sample
each (a private temporary folder; removed at close), written by :class:`~guardscope.corpus.CorpusWriter`
and read back with the same codecs as an analysis, so the child's calls have the recorded
requests' shapes, strides, dtypes and structured values (KV caches, graph batches...).

The model is rebuilt in the child from its spec (the catalog's, or ``serve``'s ``model_spec``):
its weights are inputs of the compiled graph, not part of any cache key, so a factory's own
weights do (inductor's ``freezing``, which bakes weights in, is off by default).

Whatever the child does, the serving process checks the result itself: it loads the artifacts,
compiles the call on its background thread as the thread strategy would, and counts the cache
hits and misses of that compile (:func:`guardscope.torch_compat.compile_cache_counters`); a child
that failed, timed out or was killed fails the background compile (the topology stays eager).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import GuardscopeError
from ..proving.isolation import Completed, child_environment, kill_group

# The child's files in each job folder.
RESULT = "result.json"
ARTIFACTS = "artifacts.bin"
OUTPUT = "output.txt"


@dataclass(frozen=True)
class ChildCompile:
    """What one child compile handed back: its job folder (a corpus of the one call), the
    compile-cache artifacts (None when torch saved none), the child's wall ``seconds`` and its
    result document (graphs, whether a graph accepts the call, its own set-up seconds...)."""

    job: Path
    artifacts: bytes | None
    seconds: float
    result: dict[str, Any] = field(default_factory=dict)


class ChildCompileError(GuardscopeError):
    """The child process ended without compiling the call (failed, timed out, killed, closed)."""


class ChildCompiler:
    """The serving process's side: writes a fallback call as a one-sample corpus, runs
    ``python -m guardscope.runtime.child_compile`` on it (in a session of its own, killed with its
    process group on a timeout or :meth:`close`), and returns the artifacts it saved.

    ``spec_for(folder)`` gives the model spec a corpus in ``folder`` must name (file specs are
    stored relative to their corpus). One compile at a time (the background worker's).
    """

    def __init__(self, *, plan_dir: Path, plan: str, spec_for: Callable[[Path], str], compile: dict[str, Any],
                 method: str | None, backend: str, device: str, inference_mode: bool, timeout: float = 600.0) -> None:
        self.plan_dir = Path(plan_dir).resolve()
        self.plan = plan
        self._spec_for = spec_for
        self._compile = dict(compile)
        self._method = method
        self.backend = backend
        self.device = device
        self.inference_mode = inference_mode
        self.timeout = timeout
        self._root = Path(tempfile.mkdtemp(prefix="guardscope-background-"))
        self._history: list[Path] = []  # job corpora the serving process compiled, in order
        self._jobs = 0
        self._lock = threading.Lock()
        self._child: subprocess.Popen | None = None
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The running child's process id (None when none runs)."""
        with self._lock:
            return self._child.pid if self._child is not None else None

    def compile(self, args: tuple, kwargs: dict) -> ChildCompile:
        """Compile this call's topology in a child; raises :class:`ChildCompileError` when the
        child did not (its message names the cause: its own error, a timeout, a signal)."""
        from ..corpus import CorpusWriter

        self._jobs += 1
        job = self._root / f"job-{self._jobs:04d}"
        corpus = job / "corpus"
        with CorpusWriter(corpus, model=self._spec_for(corpus), compile=self._compile, method=self._method) as writer:
            writer.add(*args, **kwargs)
        command = [sys.executable, "-m", "guardscope.runtime.child_compile", str(self.plan_dir), self.plan,
                   str(job), "--backend", self.backend, "--device", self.device,
                   "--inference-mode" if self.inference_mode else "--no-inference-mode",
                   *(str(done / "corpus") for done in self._history), str(corpus)]
        started = time.perf_counter()
        with open(job / OUTPUT, "w") as output:
            with self._lock:
                if self._closed:
                    raise ChildCompileError("closed before the compile process started")
                self._child = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT,
                                               env=child_environment(), start_new_session=True)
            child = self._child
            try:
                returncode = child.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                kill_group(child.pid)
                child.wait()
                raise ChildCompileError(f"the compile process timed out after {self.timeout:g} s") from None
            finally:
                with self._lock:
                    self._child = None
        seconds = time.perf_counter() - started
        if self._closed:
            raise ChildCompileError("closed while the compile process ran")
        result_path = job / RESULT
        if returncode != 0 or not result_path.is_file():
            text = (job / OUTPUT).read_text(errors="replace")
            raise ChildCompileError(Completed(returncode, text, "", seconds).failure("the compile process"))
        result = json.loads(result_path.read_text())
        if "error" in result:
            raise ChildCompileError(f"the compile process: {result['error']}")
        artifacts = (job / ARTIFACTS).read_bytes() if (job / ARTIFACTS).is_file() else None
        return ChildCompile(job, artifacts, seconds, result)

    def commit(self, done: ChildCompile) -> None:
        """The serving process compiled ``done``'s call too: later children replay it, in order."""
        self._history.append(done.job)

    def close(self) -> None:
        """Kill a running child (its whole process group) and remove the job folders. Idempotent."""
        with self._lock:
            self._closed = True
            child = self._child
        if child is not None:
            kill_group(child.pid)
        shutil.rmtree(self._root, ignore_errors=True)


# --- the child -------------------------------------------------------------------------------------


def _compile_in_child(plan_dir: Path, plan: str, corpora: list[Path], backend: str, device: str,
                      inference_mode: bool) -> tuple[dict[str, Any], bytes | None]:
    """Set the plan up as the serving process did, replay the calls compiled in the background so
    far, then the new one (the last corpus); the result document and the artifacts."""
    import torch

    from .. import plans, store, torch_compat
    from ..corpus import load_corpus, load_model
    from ..options import production_options
    from ..proving.setup import set_up_plan

    started = time.perf_counter()
    catalog = store.read_catalog(plan_dir)
    options = production_options(catalog, backend=backend, device=device, inference_mode=inference_mode)
    loaded = [load_corpus(path) for path in corpora]
    model = load_model(loaded[-1].manifest.model, base_dir=loaded[-1].path, method=catalog.get("method"))
    bundle = plan in plans.BUNDLED and (plan_dir / store.bundle_files(plan)[0]).is_file()
    module, runner, setup_seconds, _ = set_up_plan(plan, plan_dir, model, options, use_bundle=bundle)
    samples = [corpus.sample(index) for corpus in loaded for index in range(len(corpus))]
    with torch_compat.raised_recompile_limit(runner.graphs() + len(samples) + 1):
        for sample in samples:
            call = runner.prepare(sample, mark=False)
            if plan == "unbacked":
                module.mark(*call.args, **call.kwargs)
            runner.forget_entries()
            with runner.grad_context():
                runner.compiled(*call.args, **call.kwargs)
    torch_compat.synchronize(runner.device)
    accepted = runner.serving(samples[-1], mark=False) is not None if plan != "unbacked" else None
    saved = torch_compat.save_compile_cache()
    result = {
        "graphs": runner.graphs(),
        "accepted": accepted,
        "replayed": len(samples),
        "setup_seconds": round(setup_seconds, 3),
        "seconds": round(time.perf_counter() - started, 3),
        "bundle": bundle,
        "torch_version": str(torch.__version__),
        "artifacts": saved[1] if saved is not None else None,
    }
    return result, saved[0] if saved is not None else None


def child_main(argv: list[str]) -> int:
    import argparse

    from .. import files, store

    parser = argparse.ArgumentParser(prog="python -m guardscope.runtime.child_compile")
    parser.add_argument("plan_dir", type=Path)
    parser.add_argument("plan")
    parser.add_argument("job", type=Path)
    parser.add_argument("corpora", type=Path, nargs="+", help="the calls to replay after the set-up, in order")
    parser.add_argument("--backend", required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--inference-mode", action=argparse.BooleanOptionalAction, required=True)
    arguments = parser.parse_args(argv)
    try:
        result, artifacts = _compile_in_child(arguments.plan_dir, arguments.plan, arguments.corpora,
                                              arguments.backend, arguments.device, arguments.inference_mode)
    except Exception as exc:  # noqa: BLE001 - the parent reads it from the result, one line
        text = str(exc).strip()
        result, artifacts = {"error": f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"}, None
    if artifacts is not None:
        files.write_atomic(arguments.job / ARTIFACTS, artifacts)
    store.write_json(arguments.job / RESULT, result)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(child_main(sys.argv[1:]))


__all__ = ["ChildCompile", "ChildCompileError", "ChildCompiler", "child_main"]
