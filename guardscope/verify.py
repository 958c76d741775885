"""Prove each emitted artifact on the corpus, each in a fresh subprocess.

``verify(out_dir)`` starts ``python -m guardscope.verify ARTIFACT DIR RESULT`` once per
artifact: a crash or segfault (AOTInductor has segfaulted on the seed model) becomes a ``crashed``
result for that artifact, never the end of the others. The child compiles the model with the
catalog's options, applies the artifact as its docstring says, replays the corpus and reports:

* warmup / unbacked: graphs compiled during set-up, set-up seconds, and every compile during the
  replay (a recompile: the artifact failed) with its sample and guard failures. With
  ``fullgraph`` a sample the existing graphs' guards accept is not run — it cannot compile.
* export: ``torch.export`` with the artifact's Dims, then every topology's representative
  through the exported program, compared with eager.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from .isolation import import_file, run_module

ARTIFACTS = ("warmup", "unbacked", "export")
FILES = {"warmup": "warmup.py", "unbacked": "unbacked.py", "export": "export_dims.py"}


def _result(name: str, status: str, reason: str | None = None, **fields: Any) -> dict[str, Any]:
    result = {
        "name": name,
        "status": status,
        "reason": reason,
        "setup_graphs": None,
        "setup_seconds": None,
        "replay_recompiles": None,
        "recompile_samples": [],
        "failures": [],
        "samples_replayed": None,
        "probed_replayed": 0,
        "topologies": [],
    }
    result.update(fields)
    return result


def run_artifact(out_dir: Path, name: str, *, holdout: float | None, timeout: float) -> dict[str, Any]:
    """Verify one artifact in a fresh interpreter; turn any death of it into a result."""
    if not (out_dir / FILES[name]).is_file():
        return _result(name, "skipped", f"{FILES[name]} not found: run 'guardscope emit-warmup {out_dir}'")
    result_path = out_dir / f".verify-{name}.json"
    arguments = [name, str(out_dir), str(result_path)]
    if holdout is not None:
        arguments += ["--holdout", str(holdout)]
    outcome = run_module("guardscope.verify", arguments, result_path, timeout=timeout,
                         what="the verification process")
    if outcome.result is not None:
        return outcome.result
    return _result(name, "crashed", outcome.failure,
                   setup_seconds=None if outcome.timed_out else round(outcome.seconds, 3))


# --- the child ---------------------------------------------------------------------------------


def _replay_split(corpus: Any, holdout: float | None, probed: list[Any] = ()) -> Iterator[Any]:
    """The corpus, or its last ``holdout`` fraction, streamed shard by shard; then the probed
    samples the fixes cover (numbered after the corpus)."""
    start = 0 if holdout is None else int(len(corpus) * (1.0 - holdout))
    yield from (sample for sample in corpus if sample.index >= start)
    yield from probed


def probed_samples(out_dir: Path, corpus: Any) -> tuple[dict[str, Any] | None, list[Any]]:
    """The probe document and samples when the fixes were emitted with --include-probed."""
    fixes = out_dir / "fixes.json"
    if not fixes.is_file() or not json.loads(fixes.read_text()).get("probed", {}).get("included"):
        return None, []
    from .pipeline import load_probed

    return load_probed(out_dir, len(corpus))


def _verify_compiled(name: str, out_dir: Path, catalog: dict, corpus: Any, model: Any, holdout: float | None) -> dict:
    from . import torch_compat
    from .capture import TraceCapture, events_from_records
    from .classify import classify_reasons
    from .pipeline import production_options
    from .replay import Runner

    module = import_file(out_dir / FILES[name])
    options = production_options(catalog)
    if name == "unbacked":
        module.configure()
    # Dynamo's own recompile limit stays as in production: an artifact that needs more graphs
    # than the default allows must raise it itself.
    with TraceCapture() as capture:
        runner = Runner(model, options)
        started = time.perf_counter()
        capture.set_sample(None)
        module.warmup(runner.compiled, device=options.device, inference_mode=options.inference_mode)
        setup_seconds = time.perf_counter() - started
        setup_graphs = runner.graphs()
        replayed = 0
        _, probed = probed_samples(out_dir, corpus)
        for sample in _replay_split(corpus, holdout, probed):
            capture.set_sample(sample.index)
            args, kwargs, bound = runner.prepare(sample, mark=False)
            if name == "unbacked":
                module.mark(*args, **kwargs)
            with runner.grad_context():
                accepted = options.fullgraph and runner.serving_locals({**runner.self_local, **bound})
                if not accepted:
                    runner.forget_entries()
                    runner.compiled(*args, **kwargs)
            replayed += 1
        capture.set_sample(None)
    events = events_from_records(capture.records).events
    recompiles = [e for e in events if e.sample is not None]
    failures = [
        {"sample": e.sample, "reasons": [f"{f.kind.value}: {f.raw}" for f in classify_reasons(e.reasons)]}
        for e in recompiles
    ]
    torch_compat.reset_dynamo()
    return _result(
        name,
        "passed" if not recompiles else "failed",
        None if not recompiles else f"{len(recompiles)} recompile(s) during the replay, first at sample {recompiles[0].sample}",
        setup_graphs=setup_graphs,
        setup_seconds=round(setup_seconds, 3),
        replay_recompiles=len(recompiles),
        recompile_samples=[e.sample for e in recompiles],
        failures=failures,
        samples_replayed=replayed,
        probed_replayed=len(probed),
    )


def _verify_export(out_dir: Path, catalog: dict, corpus: Any, model: Any) -> dict:
    import torch

    module = import_file(out_dir / FILES["export"])
    model = model.eval()
    example = corpus.sample(module_example(out_dir, catalog))
    started = time.perf_counter()
    try:
        program = module.export(model, *example.args, **example.kwargs)
    except Exception as exc:
        return _result("export", "failed", f"torch.export failed: {type(exc).__name__}: {str(exc).splitlines()[0][:400]}")
    setup_seconds = time.perf_counter() - started
    exported = program.module()
    topologies = []
    document, probed = probed_samples(out_dir, corpus)
    if document is not None:
        from .pipeline import with_probed

        catalog = with_probed(catalog, document, len(corpus))
    by_index = {sample.index: sample for sample in probed}
    for topology in catalog["topologies"]:
        sample = by_index.get(topology["first_sample"]) or corpus.sample(topology["first_sample"])
        try:
            with torch.no_grad():
                got = exported(*sample.args, **sample.kwargs)
                want = model(*sample.args, **sample.kwargs)
            same = all(
                torch.allclose(a, b, rtol=1e-4, atol=1e-4)
                for a, b in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want))
                if isinstance(a, torch.Tensor)
            )
            error = None if same else "output differs from eager beyond rtol=atol=1e-4"
        except Exception as exc:
            error = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:400]}"
        topologies.append({"id": topology["id"], "probed": topology.get("probed"), "passed": error is None, "error": error})
    failed = [t for t in topologies if not t["passed"]]
    return _result(
        "export",
        "passed" if not failed else "failed",
        None if not failed else "the exported program rejects " + ", ".join(
            f"T{t['id']} ({t['error']})" for t in failed),
        setup_graphs=1,
        setup_seconds=round(setup_seconds, 3),
        samples_replayed=len(topologies),
        topologies=topologies,
    )


def module_example(out_dir: Path, catalog: dict) -> int:
    fixes = out_dir / "fixes.json"
    if fixes.is_file():
        for artifact in json.loads(fixes.read_text()).get("artifacts", []):
            if artifact.get("name") == "export":
                return int(artifact.get("details", {}).get("example_sample", 0))
    largest = max(catalog["topologies"], key=lambda t: t["count"])
    return int(largest["first_sample"])


def child_main(argv: list[str]) -> int:
    import argparse

    from .output import write_json
    from .pipeline import _load_analysis

    parser = argparse.ArgumentParser(prog="python -m guardscope.verify")
    parser.add_argument("artifact", choices=ARTIFACTS)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("result", type=Path)
    parser.add_argument("--holdout", type=float, default=None)
    arguments = parser.parse_args(argv)
    out, catalog, corpus, model = _load_analysis(arguments.out_dir)
    if arguments.artifact == "export":
        result = _verify_export(out, catalog, corpus, model)
    else:
        result = _verify_compiled(arguments.artifact, out, catalog, corpus, model, arguments.holdout)
    write_json(arguments.result, result)
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
