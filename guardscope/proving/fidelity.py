"""``guardscope fidelity``: the analysis against one made with the production backend and
device, in a child process, compared.

The default analysis uses the eager backend because Dynamo's guards (and so recompiles and
topologies) do not depend on the backend; this checks that claim on the user's own model. It is
judged on what production feels: which samples compile, in which frame, failing which kinds of
guard against which graph, and which samples share a graph. The guard texts of failures are
ignored (inductor prints int32 bounds); a guard only one backend adds (inductor's float bounds
such as ``((96*___stack1.size()[0]) / (96 + 35*___stack1.size()[0])) > 0.0034``), which changes a
topology's facts but not its members or graph, is listed apart as wording: the verdict is then
``wording`` (same in production), not ``different``.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import store
from ..catalog.diff import DIFFERENT, diff_catalogs
from ..errors import CompileOptionsError
from ..model import GUARD_TEXT
from ..options import analysis_options
from .isolation import output_tail, python_error, run_child, signal_name


def check(out: Path, catalog: dict[str, Any], *, corpus: str | Path | None = None, backend: str = "inductor",
          device: str = "cuda", mode: str | None = None, timeout: float = 3600.0) -> dict[str, Any]:
    """Re-analyse the corpus (the analysed one, or ``corpus``) with ``backend`` on ``device`` into
    ``out/fidelity/`` and write ``fidelity.json`` (:func:`compare`): the verdict, what differs,
    and the wording-only differences apart. The options are checked before the corpus is looked for."""
    options = analysis_options(catalog)
    checked = replace(options, backend=backend, device=device, mode=mode or options.mode)
    checked.validate()
    corpus_dir = store.corpus_dir_of(out, catalog, corpus)
    # Absolute: the child runs in the corpus folder (a relative model spec resolves from there),
    # where a relative DIR would put the re-analysis inside the user's corpus.
    target = (out / store.FIDELITY_DIR).resolve()
    command = [sys.executable, "-m", "guardscope.cli", "analyze", str(corpus_dir.resolve()), "--out", str(target),
               # this process is the isolation: the child analyses in itself (no grandchild to orphan)
               "--force", "--quiet", "--no-isolate", "--accept-errors", "--backend", backend, "--device", device,
               "--model", str(catalog["model"]), "--recompile-limit", str(options.recompile_limit)]
    if checked.mode:
        command += ["--mode", checked.mode]
    if not options.duck_shape:
        command.append("--no-duck-shape")
    for path, dim in options.mark_unbacked:
        command += ["--mark-unbacked", f"{path}:{dim}"]
    if options.mark_unbacked:
        command += ["--mark-samples", options.mark_samples]
    completed = run_child(command, timeout=timeout, cwd=corpus_dir.resolve())
    if completed.returncode is None:
        raise CompileOptionsError(f"the {backend} analysis took longer than {timeout:.0f} s")
    if completed.returncode != 0:
        error = python_error(completed.stderr or completed.stdout or "")  # its root cause, where, what ended it
        tail = error.describe() if error is not None else " | ".join(
            output_tail(completed.stderr or completed.stdout or "", lines=4))
        status = signal_name(completed.returncode) if completed.returncode < 0 else f"exit {completed.returncode}"
        raise CompileOptionsError(f"the {backend} analysis on {device} failed ({status}): {tail}")
    if not (target / store.CATALOG).is_file():
        raise CompileOptionsError(f"the {backend} analysis on {device} finished but wrote no {target / store.CATALOG}")
    document = compare(catalog, store.read_catalog(target), backend=backend, device=device, mode=checked.mode)
    store.write_document(out, store.FIDELITY, document)
    return document


def compare(catalog: dict[str, Any], checked: dict[str, Any], *, backend: str, device: str,
            mode: str | None) -> dict[str, Any]:
    """The ``fidelity.json`` document for the default analysis's catalog against the production
    backend's (pure): ``verdict`` is ``identical``, ``wording`` (same in production; the facts or
    guard texts only one side has are in ``wording_only``) or ``different``; ``identical`` is
    true only when nothing differs, wording included."""
    labels = (f"default analysis ({catalog['compile'].get('backend')}, {catalog['compile'].get('device')})",
              f"{backend} on {device}")
    result = diff_catalogs(catalog, checked, ignore=GUARD_TEXT, labels=labels)
    return {
        "schema": 1,
        "backend": backend,
        "device": device,
        "mode": mode,
        "ignore": list(GUARD_TEXT),
        "verdict": result.verdict,
        "identical": result.identical,
        "same_in_production": result.verdict != DIFFERENT,
        "labels": list(labels),
        "wording_only": result.wording_only(),
        "summary": result.summary_lines(),
    }
