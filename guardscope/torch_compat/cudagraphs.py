"""CUDA Graph Trees (``mode="reduce-overhead"``), observed without patching torch: the
``cudagraphs`` artifact loggers of ``torch._inductor.cudagraph_trees`` / ``cudagraph_utils``
(new trees per size key, recordings, "skipping cudagraphs due to ..."), the
``chromium_event`` records torch writes to the structured trace around each capture
(``CUDAGraphNode.record``, torch >= 2.6), and ``torch._dynamo.utils.counters["inductor"]
["cudagraph_skips"]``, which counts skips even when a message's wording is unknown; and the
inductor settings and ``torch.compile`` modes that decide what CUDA Graph Trees record.
"""

from __future__ import annotations

import logging

from .versions import version_tuple


# Modules whose ``cudagraphs`` artifact logger reports recordings and skips (torch 2.2 - 2.14).
CUDAGRAPH_LOG_MODULES = ("torch._inductor.cudagraph_trees", "torch._inductor.cudagraph_utils")
CUDAGRAPH_ARTIFACT = "cudagraphs"


def cudagraph_loggers() -> list[logging.Logger]:
    """The ``cudagraphs`` artifact loggers, including ones not created yet.

    ``torch._logging.getArtifactLogger(module, "cudagraphs")`` names its logger
    ``<module>.__cudagraphs``; ``logging.getLogger`` returns the same object whether torch has
    imported the module yet or not, so a handler attached now sees its records later.
    """
    from torch._logging import _internal

    suffix = f".__{CUDAGRAPH_ARTIFACT}"
    names = {module + suffix for module in CUDAGRAPH_LOG_MODULES}
    registry = getattr(_internal, "log_registry", None)
    qnames = getattr(registry, "get_artifact_log_qnames", None)
    if callable(qnames):
        names |= {name for name in qnames() if name.endswith(suffix)}
    skips = _skip_logger_name()
    if skips is not None:
        names.add(skips)
    return [logging.getLogger(name) for name in sorted(names)]


def _skip_logger_name() -> str | None:
    """The logger "skipping cudagraphs due to ..." goes to where it is not a ``cudagraphs`` one:
    ``cudagraph_utils.log_cudagraph_skip_and_bump_counter`` writes to ``perf_hint_log`` (the
    ``perf_hints`` artifact) in torch 2.9.1 and 2.10.0, to ``cudagraphs_log`` in 2.11.0 to 2.14.1
    (versions read in their sources). Detected from the names the function's code uses."""
    try:
        from torch._inductor import cudagraph_utils
    except ImportError:  # pragma: no cover - every supported torch has it
        return None
    function = getattr(cudagraph_utils, "log_cudagraph_skip_and_bump_counter", None)
    names = getattr(getattr(function, "__code__", None), "co_names", ())
    hints = getattr(cudagraph_utils, "perf_hint_log", None)
    if "perf_hint_log" in names and "cudagraphs_log" not in names and isinstance(hints, logging.Logger):
        return hints.name
    return None


def cudagraph_skip_count() -> int:
    """Inductor's running count of "skipping cudagraphs" decisions (0 where torch lacks it)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # pragma: no cover - every supported torch has it
        return 0
    inductor = counters.get("inductor")
    return int(inductor.get("cudagraph_skips", 0)) if inductor is not None else 0


def partitions_dynamic_shapes() -> bool:
    """Whether ``cudagraph_skip_dynamic_graphs`` partitions a graph rather than skipping it.

    With inductor graph partitioning on (``torch._inductor.config.graph_partition``, env
    ``TORCHINDUCTOR_GRAPH_PARTITION``, on by default outside fbcode) and a torch whose scheduler
    partitions around ops that use symbolic sizes (pytorch PR 170884, torch 2.11+:
    ``scheduler.get_scheduler_node_symbol_uses``, and ``compile_fx`` no longer disables CUDA
    graphs for a graph with symbolic inputs), only the static-shape partitions are CUDA-graphed.
    Otherwise the whole graph is skipped ("skipping cudagraphs due to graph with symbolic
    shapes inputs and config.triton.cudagraph_skip_dynamic_graphs=True").

    Versions read: ``config.graph_partition`` is in 2.9.1 to 2.14.1; ``get_scheduler_node_symbol_uses``
    is a module-level function of ``scheduler`` in 2.10.0 to 2.14.1 (2.9.1 defines it inside a
    method only, so the ``hasattr`` is False there, and True on 2.10.0); the partitioning itself was
    observed on 2.11 (H200) only.
    """
    from torch._inductor import config

    if not getattr(config, "graph_partition", False):
        return False
    # torch 2.11 on an H200 showed the behaviour (no skip logged, static partitions recorded once
    # per graph); an earlier build has it when it has the PR's function (importing the
    # scheduler costs ~0.6 s, so only then).
    if version_tuple() >= (2, 11):
        return True
    from torch._inductor import scheduler

    return hasattr(scheduler, "get_scheduler_node_symbol_uses")


def cudagraph_config() -> dict[str, bool]:
    """The inductor settings that decide what CUDA Graph Trees record, read now:
    ``skip_dynamic_graphs`` (``config.triton.cudagraph_skip_dynamic_graphs``) and
    ``graph_partition`` (see :func:`partitions_dynamic_shapes`)."""
    from torch._inductor import config

    return {
        "skip_dynamic_graphs": bool(config.triton.cudagraph_skip_dynamic_graphs),
        "graph_partition": partitions_dynamic_shapes(),
    }


def mode_uses_cudagraphs(mode: str | None) -> bool:
    """Whether ``torch.compile(mode=mode)`` turns CUDA graphs on ("reduce-overhead",
    "max-autotune"), as torch's own ``list_mode_options`` says."""
    if not mode:
        return False
    try:
        from torch._inductor import list_mode_options

        options = list_mode_options(mode)
    except Exception:  # an unknown mode: torch.compile itself will say so
        return mode in ("reduce-overhead", "max-autotune")
    return bool(options.get("triton.cudagraphs"))
