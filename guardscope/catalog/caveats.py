"""What the user should know about an analysis that its numbers do not say (pure: the catalog in,
warnings out; ``analyze`` prints them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from ..model import Catalog
from ..text import compile_failure_cause
from .frames import hit_recompile_limit


def caveats(catalog: Catalog, *, recompile_limit: int, frames_followed: bool, torch_version: str,
            out: Path) -> list[str]:
    """What the user should know about an analysis that its numbers do not say; a frame Dynamo
    stopped compiling comes first (in production it silently loses the compile)."""
    warnings = [skipped_frame_warning(catalog, skipped) for skipped in catalog.skipped_frames]
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
    if catalog.indices == "rows":
        warnings.append(ROW_INDICES_WARNING)
    # After a failed compile skipped the forward, few samples ran a graph: the estimate says nothing.
    small = None if forward_skipped(catalog.skipped_frames) else small_corpus_warning(catalog.risk())
    if small:
        warnings.append(small)
    return warnings


def forward_skipped(skipped_frames: Iterable[dict]) -> bool:
    """Whether a failed compile made Dynamo skip the first frame (catalog.json's ``skipped_frames``)."""
    return any(skipped["frame"] == 0 for skipped in skipped_frames)


ROW_INDICES_WARNING = (
    "the corpus is a traffic log written before guardscope kept each call's place (log version 1): it "
    "gathered a signature's repeats on one row without saying where they came, so its sample indices are the "
    "rows' order, not the calls' (compiles, topologies and counts are exact; a sample's index is not the call "
    "production made at that index); a log written now keeps them"
)

# The chance that the next request needs a graph the corpus never compiled from which the
# corpus is too small to speak for production (a fix proven on it is proven for its inputs only).
UNSEEN_WARNING = 0.1
# The rule of three: a corpus of n samples that shows no new topology still leaves a chance of up
# to 3/n (95% confidence) that the next request is one.
RULE_OF_THREE = 3


def small_corpus_warning(risk: dict) -> str | None:
    """One line when catalog.json's ``risk`` cannot mean much: its Good-Turing chance of an
    unseen topology is high, or the corpus is too small to show that chance is low."""
    samples, probability = risk.get("samples"), risk.get("unseen_topology_probability")
    if not samples or probability is None or max(probability, RULE_OF_THREE / samples) < UNSEEN_WARNING:
        return None
    singletons = risk["singleton_topologies"]
    if probability >= UNSEEN_WARNING:
        why = (f"{singletons} of {samples} sample{'s' if samples != 1 else ''} had a topology seen only once, so "
               f"the chance the next request needs a graph the corpus never compiled is about {probability:.0%} "
               "(Good-Turing)")
    else:
        why = (f"{samples} samples cannot show that the chance the next request needs a graph the corpus never "
               f"compiled is below {RULE_OF_THREE / samples:.0%} (the rule of three)")
    return (f"the corpus is too small to speak for production: {why}; fixes proven on it are proven for these "
            "inputs only: record more requests")


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


def skipped_frame_warning(catalog: Catalog, skipped: dict) -> str:
    """A failed compile that made Dynamo skip its frame: which compile, why, and what it cost."""
    failed = (f"compile {skipped['compile_id']} of {skipped['frame_label']} failed at sample {skipped['sample']} "
              f"({compile_failure_cause(skipped)})")
    if skipped["eager_samples"] is None:
        return (f"{failed}; Dynamo then stopped compiling that frame: every later call ran it eagerly, and "
                "in production one such request silently loses that part of the compile for the rest of the process")
    return (f"{failed}; Dynamo then stopped compiling the forward and ran every later call eagerly "
            f"({len(skipped['eager_samples'])} of the {catalog.samples} samples ran without a compiled graph): in "
            "production one such request silently turns torch.compile off for the rest of the process. "
            "Check requests before the compiled call, or raise from a function decorated with "
            "torch.compiler.disable (Dynamo does not trace it, so its exception stops no compile)")


def _first_frame_attempts(catalog: Catalog) -> int:
    """The first frame's graphs and failed compiles."""
    first_frame = next((f for f in catalog.frames if f["frame"] == 0), None)
    return first_frame["graphs"] + first_frame["failed_compiles"] if first_frame else len(catalog.graphs)


def limit_reached(catalog: Catalog, recompile_limit: int) -> bool:
    """Whether the first frame hit Dynamo's recompile limit: a failed compile of it says so, or
    it has as many graphs and failed compiles as the limit allows."""
    return _first_frame_attempts(catalog) >= recompile_limit or any(
        c.event.frame_id == 0 and hit_recompile_limit(c.event) for c in catalog.compiles)


def not_analysed_warning(catalog: Catalog, recompile_limit: int) -> str:
    """Why samples ran without a compiled graph, as far as the catalog shows it: the first
    frame's recompile limit when it was reached, else no claim about the cause."""
    count = len(catalog.not_analysed)
    if limit_reached(catalog, recompile_limit):
        return (f"{count} samples ran without a compiled graph: the first frame reached Dynamo's recompile "
                f"limit ({recompile_limit}); they are listed as not analysed")
    return (f"{count} samples ran without a compiled graph accepting them in the first frame "
            f"({_first_frame_attempts(catalog)} graphs, recompile limit {recompile_limit}); they are listed as not analysed")
