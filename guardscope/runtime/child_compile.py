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
depend on the shapes this frame compiled before. The compile process therefore does, in order,
what the serving process compiled: the plan's set-up (its warmup, or the unbacked plan's
configure, warmup and marks; the plan's compile-cache bundle when there is one), then every call
compiled in the background so far, then the new call. It stays alive between compiles, so a
later call costs only its own compile; it is replaced by a new one, which replays all of that
again, whenever its state may have left the serving process's (see :class:`ChildCompiler`). The calls travel as guardscope corpora of one sample
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
import queue
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

# The compile process's CPU priority (its threads and its own children, inductor's compile
# workers, inherit it): the lowest, so that the serving process's threads, runnable at any moment,
# take a core first when the compile keeps every core busy.
CHILD_NICENESS = 19

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
    """The serving process's side: writes a fallback call as a one-sample corpus and has a compile
    process compile it; returns the compile-cache artifacts that process saved.

    The compile process (``python -m guardscope.runtime.child_compile``, in a session of its own)
    stays alive between compiles: it sets the plan up once, and each job then replays only the new
    call, so a later topology costs its compile, not a process start, torch's import and the
    plan's set-up again. Whenever its state may differ from the serving process's — it failed,
    timed out, was killed, or the serving process did not :meth:`commit` a compile it did — it is
    killed with its process group, and the next job starts a new one that replays every committed
    call first, in order. ``spec_for(folder)`` gives the model spec a corpus in ``folder`` must name
    (file specs are stored relative to their corpus). One compile at a time (the background
    worker's).
    """

    def __init__(self, *, plan_dir: Path, plan: str, spec_for: Callable[[Path], str], compile: dict[str, Any],
                 method: str | None, backend: str, device: str, grad_mode: str, timeout: float = 600.0) -> None:
        self.plan_dir = Path(plan_dir).resolve()
        self.plan = plan
        self._spec_for = spec_for
        self._compile = dict(compile)
        self._method = method
        self.backend = backend
        self.device = device
        self.grad_mode = grad_mode
        self.timeout = timeout
        self._root = Path(tempfile.mkdtemp(prefix="guardscope-background-"))
        self._history: list[Path] = []  # job folders whose call the serving process compiled, in order
        self._replayed = 0  # of them, the ones the running compile process has replayed
        self._jobs = 0
        self._starts = 0
        self._lock = threading.Lock()
        self._child: subprocess.Popen | None = None
        self._replies: queue.Queue[str | None] = queue.Queue()
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The compile process's id (None when none runs)."""
        with self._lock:
            return self._child.pid if self._child is not None else None

    def _start(self) -> subprocess.Popen:
        """A new compile process (under the lock), and the thread that reads its replies."""
        if self._closed:
            raise ChildCompileError("closed before the compile process started")
        self._starts += 1
        log = open(self._root / f"{OUTPUT}.{self._starts}", "w")  # noqa: SIM115 - the child writes it
        command = [sys.executable, "-m", "guardscope.runtime.child_compile", str(self.plan_dir), self.plan,
                   "--backend", self.backend, "--device", self.device,
                   "--grad-mode", self.grad_mode]
        try:
            child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                     env=child_environment(), start_new_session=True)
        finally:
            log.close()
        replies: queue.Queue[str | None] = queue.Queue()

        def read() -> None:  # the replies; None at its end (it exited or was killed)
            for line in child.stdout:
                if line.startswith(REPLY):
                    replies.put(line[len(REPLY):].strip())
            replies.put(None)

        threading.Thread(target=read, name="guardscope-compile-process-reader", daemon=True).start()
        self._child, self._replies, self._replayed = child, replies, 0
        return child

    def _stop(self) -> None:
        """Kill the compile process, if one runs (its state is no longer the serving process's)."""
        with self._lock:
            child, self._child = self._child, None
        if child is not None:
            kill_group(child.pid)
            child.wait()

    def compile(self, args: tuple, kwargs: dict) -> ChildCompile:
        """Compile this call's topology in the compile process; raises :class:`ChildCompileError`
        when it did not (the message names the cause: its own error, a timeout, a signal)."""
        from ..corpus import CorpusWriter

        self._jobs += 1
        job = self._root / f"job-{self._jobs:04d}"
        corpus = job / "corpus"
        with CorpusWriter(corpus, model=self._spec_for(corpus), compile=self._compile, method=self._method) as writer:
            writer.add(*args, **kwargs)
        started = time.perf_counter()
        with self._lock:
            child = self._child if self._child is not None and self._child.poll() is None else self._start()
            replay = [str(done / "corpus") for done in self._history[self._replayed:]] + [str(corpus)]
            replies = self._replies
        try:
            child.stdin.write(json.dumps({"job": str(job), "corpora": replay}) + "\n")
            child.stdin.flush()
            reply = replies.get(timeout=self.timeout)
        except queue.Empty:
            self._stop()
            raise ChildCompileError(f"the compile process timed out after {self.timeout:g} s") from None
        except OSError:  # its stdin closed: it died before reading the job
            reply = None
        seconds = time.perf_counter() - started
        if self._closed:
            self._stop()
            raise ChildCompileError("closed while the compile process ran")
        if reply is None:
            self._stop()
            text = "".join(path.read_text(errors="replace") for path in sorted(self._root.glob(f"{OUTPUT}.*")))
            raise ChildCompileError(Completed(child.returncode, text, "", seconds).failure("the compile process"))
        result = json.loads((job / RESULT).read_text())
        if "error" in result:
            self._stop()
            raise ChildCompileError(f"the compile process: {result['error']}")
        with self._lock:
            self._replayed = len(self._history)  # and the new call, which commit() adds
        artifacts = (job / ARTIFACTS).read_bytes() if (job / ARTIFACTS).is_file() else None
        return ChildCompile(job, artifacts, seconds, result)

    def commit(self, done: ChildCompile) -> None:
        """The serving process compiled ``done``'s call too: a new compile process replays it, in
        order, and the running one has it already."""
        with self._lock:
            self._history.append(done.job)
            if self._child is not None:
                self._replayed = len(self._history)

    def discard(self) -> None:
        """The serving process did not compile what the compile process did: that process's
        Dynamo state is ahead of it, so it goes (the next job starts one that replays the
        committed calls)."""
        self._stop()

    def close(self) -> None:
        """Kill the compile process (its whole process group) and remove the job folders. Idempotent."""
        with self._lock:
            self._closed = True
        self._stop()
        shutil.rmtree(self._root, ignore_errors=True)


# --- the compile process ----------------------------------------------------------------------------

REPLY = "guardscope-compile-done "  # the line the compile process prints when a job's files are written


class _CompileState:
    """The compile process's plan, set up once (at its first job): model, runner, plan module."""

    def __init__(self, plan_dir: Path, plan: str, first_corpus: Path, backend: str, device: str,
                 grad_mode: str) -> None:
        from .. import plans, store
        from ..corpus import load_corpus, load_model
        from ..options import production_options
        from ..proving.setup import set_up_plan

        catalog = store.read_catalog(plan_dir)
        options = production_options(catalog, backend=backend, device=device, grad_mode=grad_mode)
        corpus = load_corpus(first_corpus)
        model = load_model(corpus.manifest.model, base_dir=corpus.path, method=catalog.get("method"))
        self.plan = plan
        self.bundle = plan in plans.BUNDLED and (plan_dir / store.bundle_files(plan)[0]).is_file()
        self.module, self.runner, self.setup_seconds, _ = set_up_plan(plan, plan_dir, model, options,
                                                                      use_bundle=self.bundle)

    def replay(self, corpora: list[Path]) -> dict[str, Any]:
        """Compile each call of ``corpora``, in order, as the serving process's worker did; whether
        a graph accepts the last one."""
        from .. import torch_compat
        from ..corpus import load_corpus

        runner = self.runner
        samples = [corpus.sample(index) for corpus in map(load_corpus, corpora) for index in range(len(corpus))]
        with torch_compat.raised_recompile_limit(runner.graphs() + len(samples) + 1):
            for sample in samples:
                call = runner.prepare(sample, mark=False)
                if self.plan == "unbacked":
                    self.module.mark(*call.args, **call.kwargs)
                runner.forget_entries()
                with runner.grad_context():
                    runner.compiled(*call.args, **call.kwargs)
        torch_compat.synchronize(runner.device)
        accepted = runner.serving(samples[-1], mark=False) is not None if self.plan != "unbacked" else None
        return {"graphs": runner.graphs(), "accepted": accepted, "replayed": len(samples)}


def _job(state: _CompileState | None, request: dict[str, Any], arguments: Any) -> tuple[_CompileState, dict, bytes | None]:
    import torch

    from .. import torch_compat

    started = time.perf_counter()
    corpora = [Path(path) for path in request["corpora"]]
    set_up = state is None
    if state is None:
        state = _CompileState(arguments.plan_dir, arguments.plan, corpora[0], arguments.backend, arguments.device,
                              arguments.grad_mode)
    result = state.replay(corpora)
    saved = torch_compat.save_compile_cache()
    result.update({"set_up": set_up, "setup_seconds": round(state.setup_seconds, 3) if set_up else None,
                   "seconds": round(time.perf_counter() - started, 3), "bundle": state.bundle,
                   "torch_version": str(torch.__version__), "artifacts": saved[1] if saved is not None else None})
    return state, result, saved[0] if saved is not None else None


def _lower_priority() -> None:
    """This process at :data:`CHILD_NICENESS`, before it starts a thread or a process (both inherit
    it). Where the system has no niceness, nothing."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, CHILD_NICENESS)
    except (AttributeError, OSError):
        pass


def child_main(argv: list[str]) -> int:
    """The compile process: one JSON job a line on stdin (``job``: its folder, ``corpora``: the
    calls to replay, in order), its result and artifacts written into the job's folder, then one
    :data:`REPLY` line on stdout. Ends at the end of stdin, or after a job that failed."""
    import argparse

    from .. import files, store

    parser = argparse.ArgumentParser(prog="python -m guardscope.runtime.child_compile")
    parser.add_argument("plan_dir", type=Path)
    parser.add_argument("plan")
    parser.add_argument("--backend", required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--grad-mode", required=True)
    arguments = parser.parse_args(argv)
    _lower_priority()
    state = None
    for line in sys.stdin:
        request = json.loads(line)
        job = Path(request["job"])
        try:
            state, result, artifacts = _job(state, request, arguments)
        except Exception as exc:  # noqa: BLE001 - the parent reads it from the result, one line
            text = str(exc).strip()
            result, artifacts = {"error": f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"}, None
        if artifacts is not None:
            files.write_atomic(job / ARTIFACTS, artifacts)
        store.write_json(job / RESULT, result)
        print(REPLY + job.name, flush=True)
        if "error" in result:
            return 1  # its state is unknown now: the parent starts another
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(child_main(sys.argv[1:]))


__all__ = ["CHILD_NICENESS", "ChildCompile", "ChildCompileError", "ChildCompiler", "child_main"]
