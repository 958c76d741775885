"""``guardscope fidelity``: the analysis against one made with the production backend and
device, in a child process, compared.

The default analysis uses the eager backend because Dynamo's guards (and so recompiles and
topologies) do not depend on the backend; this checks that claim on the user's own model. Guard
wording that differs between backends (inductor adds int32 bounds) is ignored; every other
difference is kept.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import store
from ..catalog.diff import diff_catalogs
from ..errors import CompileOptionsError
from ..model import GUARD_TEXT
from ..options import analysis_options
from .isolation import output_tail, run_child, signal_name


def check(out: Path, catalog: dict[str, Any], *, corpus: str | Path | None = None, backend: str = "inductor",
          device: str = "cuda", mode: str | None = None, timeout: float = 3600.0) -> dict[str, Any]:
    """Re-analyse the corpus (the analysed one, or ``corpus``) with ``backend`` on ``device`` into
    ``out/fidelity/`` and write ``fidelity.json``: whether the two catalogs are identical, and what
    differs. The options are checked before the corpus is looked for."""
    options = analysis_options(catalog)
    checked = replace(options, backend=backend, device=device, mode=mode or options.mode)
    checked.validate()
    corpus_dir = store.corpus_dir_of(out, catalog, corpus)
    target = out / store.FIDELITY_DIR
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
    if completed.returncode != 0 or not (target / store.CATALOG).is_file():
        tail = " | ".join(output_tail(completed.stderr or completed.stdout or "", lines=4))
        status = signal_name(completed.returncode) if completed.returncode < 0 else f"exit {completed.returncode}"
        raise CompileOptionsError(f"the {backend} analysis on {device} failed ({status}): {tail}")
    labels = (f"default analysis ({catalog['compile'].get('backend')}, {catalog['compile'].get('device')})",
              f"{backend} on {device}")
    result = diff_catalogs(catalog, store.read_catalog(target), ignore=GUARD_TEXT, labels=labels)
    document = {
        "schema": 1,
        "backend": backend,
        "device": device,
        "mode": checked.mode,
        "ignore": list(GUARD_TEXT),
        "identical": result.identical,
        "labels": list(labels),
        "summary": result.summary_lines(),
    }
    store.write_document(out, store.FIDELITY, document)
    return document
