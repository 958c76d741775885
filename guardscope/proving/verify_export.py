"""verify's proof of the torch.export plan: export with the module on the plan's example, then
every topology the plan claims run through the program and compared with eager."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .. import plans, store
from .isolation import import_file
from .results import PARTIAL, result as _result


def verify_export(out_dir: Path, catalog: dict, corpus: Any, model: Any) -> dict:
    """Export with the module on the plan's example, then run every topology the plan covers
    through the program and compare it with eager; the topologies the plan lists as outside the
    Dims (fixes.json) are reported as such, not run."""
    import torch

    from .. import torch_compat
    from ..fixes.exporting import explain_failure, torch_error

    module = import_file(out_dir / plans.MODULES["export"])
    model = (torch_compat.forward_owner(model) or model).eval()
    example = corpus.sample(module_example(out_dir, catalog))
    started = time.perf_counter()
    try:
        with torch_compat.no_leaked_export_hooks():
            program = module.export(model, *example.args, **example.kwargs)
    except Exception as exc:
        return _result("export", "failed", f"torch.export failed: {explain_failure(exc)}\n{torch_error(exc)}")
    setup_seconds = time.perf_counter() - started
    exported = program.module()
    planned = (store.fix_entry(out_dir, "export") or {}).get("details", {})
    outside = {item["topology"]: item["reason"] for item in planned.get("outside", [])}
    topologies = []
    document, probed = store.probed_samples(out_dir, len(corpus))
    if document is not None:
        from ..fixes.document import with_probed

        catalog = with_probed(catalog, document, len(corpus))
    by_index = {sample.index: sample for sample in probed}
    for topology in catalog["topologies"]:
        entry = {"id": topology["id"], "probed": topology.get("probed")}
        if topology["id"] in outside:
            # "passed" stays a bool for readers that count it; the error says it was not run.
            topologies.append({**entry, "status": "outside", "passed": False,
                               "error": f"outside the Dims: {outside[topology['id']]}"})
            continue
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
            error = torch_error(exc)
        topologies.append({**entry, "status": "passed" if error is None else "failed",
                           "passed": error is None, "error": error})
    return export_result(topologies, counts={t["id"]: t["count"] for t in catalog["topologies"]},
                          setup_seconds=setup_seconds)


def export_result(topologies: list[dict[str, Any]], *, counts: dict[int, int], setup_seconds: float) -> dict:
    """The export's result from each topology's outcome (pure): ``failed`` when the program
    rejects one it was planned for; ``partial`` when it runs all of those but the plan leaves
    others outside its Dims (an export that serves part of the traffic is not a pass);
    ``served_samples`` and ``topology_samples``: the samples of the topologies it ran, of all."""
    failed = [t for t in topologies if t["status"] == "failed"]
    left_out = [t for t in topologies if t["status"] == "outside"]
    served = sum(counts[t["id"]] for t in topologies if t["status"] == "passed")
    total = sum(counts[t["id"]] for t in topologies)
    if failed:
        status, reason = "failed", "the exported program rejects " + ", ".join(
            f"T{t['id']} ({(t['error'].splitlines() or [''])[0][:400]})" for t in failed)
    elif left_out:
        status, reason = PARTIAL, (
            f"serves {len(topologies) - len(left_out)} of {len(topologies)} topologies, {served} of their {total} "
            f"samples ({served / total:.0%}): " + ", ".join(f"T{t['id']}" for t in left_out)
            + " are outside the Dims, as planned")
    else:
        status, reason = "passed", None
    return _result(
        "export",
        status,
        reason,
        setup_graphs=1,
        setup_seconds=round(setup_seconds, 3),
        samples_replayed=len(topologies) - len(left_out),
        topologies=topologies,
        served_samples=served,
        topology_samples=total,
    )


def module_example(out_dir: Path, catalog: dict) -> int:
    """The sample ``emit-warmup`` exported with (fixes.json), else the largest topology's first."""
    entry = store.fix_entry(out_dir, "export")
    if entry is not None:
        return int(entry.get("details", {}).get("example_sample", 0))
    largest = max(catalog["topologies"], key=lambda t: t["count"])
    return int(largest["first_sample"])
