"""The report page: the analysis folder's JSON files -> one self-contained ``report.html``.

:func:`read_inputs` and :func:`write_report` are the only functions of the report that touch the
disk; both go through :mod:`guardscope.store`. :func:`build_context` gathers the section contexts
(:mod:`.sections`, :mod:`.charts`, :mod:`.recommendation`, :mod:`.fleet`) and one jinja Environment with
autoescape (:mod:`.environment`) renders them through ``templates/report.html``, so guard text,
paths and user code always reach the page as text. The page has inline CSS and SVG only: no
scripts, nothing fetched from the network, and nothing that changes between two renders of the
same files (no clocks, no absolute paths beyond those already in the JSON).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import plans, store
from ..corpus.spec import model_label
from .charts import cudagraphs_context, timeline_context
from .environment import ENVIRONMENT
from .fleet import fleet_context
from .recommendation import recommendation_context
from .sections import (
    bench_context,
    compile_failed_context,
    dimensions_context,
    failures_context,
    fidelity_context,
    fixes_context,
    frames_context,
    input_fixes_context,
    production_context,
    risk_context,
    summary_context,
    topologies_context,
)

# --- reading ---------------------------------------------------------------------------------

def read_inputs(out_dir: str | Path, catalog: dict | None = None) -> dict[str, Any]:
    """Load an analysis folder through :mod:`guardscope.store`: ``catalog`` (required; given, not
    read, when the caller holds it), ``timings``, ``fixes``, ``verification``, ``bench``, ``probe``,
    ``fidelity``, ``bundles`` and ``whatif`` (``None`` when absent). Keys match
    :func:`render_report`'s arguments."""
    out = Path(out_dir)
    return {
        "catalog": store.read_catalog(out) if catalog is None else catalog,
        "timings": store.read_document(out, store.TIMINGS),
        "fixes": store.read_document(out, store.FIXES),
        "verification": store.read_document(out, store.VERIFICATION),
        "bench": store.read_document(out, store.BENCH),
        "probe": store.read_document(out, store.PROBE),
        "fidelity": store.read_fidelity(out),
        "bundles": read_bundles(out),
        "whatif": store.read_document(out, store.WHATIF),
    }


def read_bundles(out_dir: str | Path) -> dict[str, Any] | None:
    """The compile-cache bundle manifests in ``out_dir`` by plan (``guardscope bundle``), or None."""
    return {plan: manifest for plan in plans.BUNDLED if (manifest := store.read_bundle_manifest(out_dir, plan))} or None


def build_context(catalog: dict, *, timings: dict | None, fixes: dict | None,
                  verification: dict | None, trace_dir: str = store.TRACE_DIR,
                  probe: dict | None = None, fidelity: dict | None = None,
                  bench: dict | None = None, bundles: dict | None = None, whatif: dict | None = None) -> dict:
    return {
        "fidelity": fidelity_context(catalog, fidelity),
        "risk": risk_context(catalog, probe),
        "title": f"guardscope report: {model_label(catalog['model'])}",
        "compile_failed": compile_failed_context(catalog),
        "production": production_context(catalog, timings, bench),
        "summary": summary_context(catalog, timings, verification, bench),
        "timeline": timeline_context(catalog, timings, bench),
        "failure_kinds": failures_context(catalog),
        "topologies": topologies_context(catalog, timings, bench),
        "fleet": fleet_context(catalog),
        "frames": frames_context(catalog, fidelity),
        "dimensions": dimensions_context(catalog),
        "fixes": fixes_context(fixes, verification, bundles),
        "input_fixes": input_fixes_context(whatif, fixes, verification),
        "recommendation": recommendation_context(catalog, fixes, verification, bench),
        "cudagraphs": cudagraphs_context(catalog, timings),
        "has_fixes": fixes is not None,
        "has_verification": verification is not None,
        "bench": bench_context(bench),
        "bench_file": store.BENCH,
        "trace_dir": trace_dir.rstrip("/"),
        "trace_file": store.TRACE_FILE,
        "catalog_file": store.CATALOG,
        "timings_file": store.TIMINGS,
        "fixes_file": store.FIXES,
        "verification_file": store.VERIFICATION,
        "whatif_file": store.WHATIF,
    }


def render_report(catalog: dict, *, timings: dict | None, fixes: dict | None,
                  verification: dict | None, trace_dir: str = store.TRACE_DIR,
                  probe: dict | None = None, fidelity: dict | None = None,
                  bench: dict | None = None, bundles: dict | None = None, whatif: dict | None = None) -> str:
    """The report page for already-loaded JSON (see :func:`read_inputs`). Reads and writes nothing."""
    context = build_context(catalog, timings=timings, fixes=fixes, verification=verification,
                            trace_dir=trace_dir, probe=probe, fidelity=fidelity, bench=bench,
                            bundles=bundles, whatif=whatif)
    return ENVIRONMENT.get_template("report.html").render(context)


def write_report(out_dir: str | Path, catalog: dict | None = None) -> Path:
    """Render ``out_dir/report.html`` from the JSON files in ``out_dir``; returns its path.
    ``catalog``: the catalog just written there, as the analysis holds it (its members as arrays:
    not parsed again into a Python int per call)."""
    out = Path(out_dir)
    inputs = read_inputs(out, catalog=catalog)
    return store.write_text(out / store.REPORT, render_report(**inputs))
