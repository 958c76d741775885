"""The records a catalog diff is made of (pure): what changed in the context, in a compile, in a
topology, in where samples are, in a dimension and in an error; the statuses they carry and the
places a sample can be in besides a topology."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...text import guard_text
from ..matching import TopologySide

# Where a sample can be in one analysis besides a topology.
RAISED = "raised"
NOT_ANALYSED = "not analysed"
RAN_EAGERLY = "ran eagerly"        # after a failed compile made Dynamo skip the forward
NOT_REPLAYED = "not replayed"      # in the corpus, but in no topology (a skipped shard)
NOT_IN_CORPUS = "not in corpus"    # past the end of a shorter corpus

# "reworded": the same members and graphs, other facts (wording only, not a production difference)
TOPOLOGY_STATUSES = ("vanished", "new", "changed", "reworded", "unchanged")
PRODUCTION_STATUSES = TOPOLOGY_STATUSES[:3]


@dataclass(frozen=True)
class ContextChange:
    """A difference in where or how the analyses ran: it never makes them different."""

    field: str        # "torch_version", "compile.backend", "corpus.samples", ...
    old: Any
    new: Any


@dataclass(frozen=True)
class CompileChange:
    """A compile present in one analysis only, or in both with other failures or outcome."""

    status: str                    # "added", "removed" or "changed"
    sample: int | None
    co_name: str
    rank: int                      # > 0 when this sample compiled this frame more than once
    old_compile_id: str | None
    new_compile_id: str | None
    old_kinds: dict[str, int]      # failure kind -> count
    new_kinds: dict[str, int]
    old_fail_type: str | None
    new_fail_type: str | None
    removed_failures: tuple[dict, ...]   # catalog failure dicts plus "against_sample", "against_topology"
    added_failures: tuple[dict, ...]
    # "changed" with the same outcome, failing against the same graphs: only the failures' other
    # fields (their guard text, the kind it reads as...) differ
    wording_only: bool = False


def failure_order(failure: dict) -> tuple:
    """The order a compile change lists its failures in: by the sample that compiled the graph
    they failed against, then kind, then text."""
    against = failure.get("against_sample")
    return (against is None, against or 0, failure["kind"], guard_text(failure))


@dataclass(frozen=True)
class TopologyChange:
    status: str                     # "vanished", "new", "changed", "reworded" or "unchanged"
    facts: tuple[str, ...]          # the new side's order when both exist
    old: TopologySide | None
    new: TopologySide | None
    lost: tuple[int, ...]           # member samples of the old topology that the new one lacks
    gained: tuple[int, ...]
    old_only: tuple[str, ...] = ()  # facts only the old side states (both sides exist)
    new_only: tuple[str, ...] = ()  # facts only the new side states


@dataclass(frozen=True)
class SampleMove:
    """Samples that were together in one place (a topology, or raised...) and now are in another."""

    old: str                        # "T3" in the old numbering, or RAISED, NOT_ANALYSED, ...
    new: str                        # "T5" in the new numbering, or a state
    old_note: str                   # "vanished", "now T5" or ""
    new_note: str                   # "new", "was T3" or ""
    samples: tuple[int, ...]


@dataclass(frozen=True)
class DimensionChange:
    dim: str
    status: str                     # "added", "removed" or "changed"
    fields: tuple[tuple[str, Any, Any], ...]   # (field, old, new) for the fields that differ


@dataclass(frozen=True)
class ErrorChange:
    """A sample that raised in both analyses, with another error."""

    sample: int
    old: str
    new: str

