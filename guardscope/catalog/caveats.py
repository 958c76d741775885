"""What the user should know about an analysis that its numbers do not say (pure: the catalog in,
warnings out; ``analyze`` prints them).
"""

from __future__ import annotations

from pathlib import Path

from ..model import Catalog


def caveats(catalog: Catalog, *, recompile_limit: int, frames_followed: bool, torch_version: str,
            out: Path) -> list[str]:
    """What the user should know about an analysis that its numbers do not say."""
    warnings = []
    if catalog.not_analysed:
        warnings.append(not_analysed_warning(catalog, recompile_limit))
    if len(catalog.frames) > 1 and not frames_followed:
        warnings.append(
            f"torch {torch_version} does not show guardscope which graph of a frame after a graph "
            "break each call ran: topologies here are the first frame's only"
        )
    if len(catalog.frames) > 1 and catalog.compile.get("backend") != "inductor":
        warnings.append(
            f"the model compiles to {len(catalog.frames)} frames ({len(catalog.graph_breaks)} distinct graph "
            f"breaks): where a graph breaks, the {catalog.compile.get('backend')} backend's guards can differ "
            f"from inductor's; run 'guardscope fidelity {out}' on the production machine to check"
        )
    if catalog.signatures is not None:
        warnings.extend(signature_warnings(catalog))
    return warnings


def signature_warnings(catalog: Catalog) -> list[str]:
    """What signature-only samples (corpus format 3) mean for this catalog."""
    section = catalog.signatures or {}
    found = []
    if not section.get("later_frames_exact", True):
        found.append(
            f"{section['samples']} of {catalog.samples} samples were recorded as their signature only: the first "
            f"frame's guards are checked exactly, but the model breaks into {len(catalog.frames)} frames and later "
            "frames see values computed from tensor data, which these samples do not carry (they ran on the data "
            f"of a full sample of the same signature: {section['ran_on_full']}, or on zero-filled tensors: "
            f"{section['ran_on_materialised']}); record with keep=\"all\" for an exact catalog of later frames"
        )
    elif section.get("ran_on_materialised"):
        listed = ", ".join(map(str, section["materialised_samples"][:5]))
        found.append(
            f"{section['ran_on_materialised']} signature-only samples had no full sample of their signature in "
            f"the corpus and compiled on zero-filled tensors built from the signature (first: {listed}); the "
            "first frame's guards do not read tensor data, so the catalog is exact"
        )
    return found


def not_analysed_warning(catalog: Catalog, recompile_limit: int) -> str:
    """Why samples ran without a compiled graph, as far as the catalog shows it: the first
    frame's graphs against the recompile limit, else no claim about the cause."""
    first_frame = next((f for f in catalog.frames if f["frame"] == 0), None)
    graphs = first_frame["graphs"] + first_frame["failed_compiles"] if first_frame else len(catalog.graphs)
    count = len(catalog.not_analysed)
    if graphs >= recompile_limit:
        return (f"{count} samples ran without a compiled graph: the first frame reached Dynamo's recompile "
                f"limit ({recompile_limit}); they are listed as not analysed")
    return (f"{count} samples ran without a compiled graph accepting them in the first frame ({graphs} graphs, "
            f"recompile limit {recompile_limit}); they are listed as not analysed")
