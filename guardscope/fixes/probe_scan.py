"""What the corpus shows the probe (reads tensors, compiles nothing): dtypes and layouts seen per
input, and which integer inputs index into which dimension (every value below that dim's size in
every scanned sample), so synthetic index tensors stay in range.
"""

from __future__ import annotations

from typing import Any

import torch

from ..replay.arguments import tensors_of
from ..torch_compat import dtype_name
from .probe_plan import ScanResult

SCAN_INDEX_SAMPLES = 64  # samples read to infer index relations (plus every representative)


def stride_order(tensor: torch.Tensor) -> tuple[int, ...]:
    """Axes from the largest stride to the smallest (contiguous: 0, 1, ..., n-1)."""
    if tensor.layout != torch.strided:
        return tuple(range(tensor.dim()))
    return tuple(sorted(range(tensor.dim()), key=lambda a: (-tensor.stride(a), a)))


def layout_of(tensor: torch.Tensor) -> tuple[str, tuple[int, ...]]:
    """``("order", stride order)`` for a tensor with elements; ``("empty", strides)`` for an
    empty one, whose strides are whatever the op that made it chose (and Dynamo guards them)."""
    if tensor.numel() == 0 and tensor.layout == torch.strided:
        return ("empty", tuple(tensor.stride()))
    return ("order", stride_order(tensor))


def _integer(tensor: torch.Tensor) -> bool:
    return not tensor.is_floating_point() and not tensor.is_complex() and tensor.dtype != torch.bool


class Scanner:
    """Accumulates :class:`ScanResult` one bound sample at a time (the corpus streams)."""

    def __init__(self, index_samples: int = SCAN_INDEX_SAMPLES) -> None:
        self.dtypes: dict[str, set[str]] = {}
        self.layouts: dict[str, set[tuple[str, tuple[int, ...]]]] = {}
        self.index_samples = index_samples
        self.index_seen = 0
        # integer path -> {dim: total slack}; None once no dim bounds it
        self.bounds: dict[str, dict[str, int] | None] = {}
        self.samples = 0

    def add(self, arguments: dict[str, Any], *, for_indexes: bool = False, data: bool = True,
            samples: int = 1) -> None:
        """Scan one call (standing for ``samples`` recorded ones). Without ``data`` (a sample
        recorded as its signature: zero-filled tensors) only dtypes and layouts are read, not
        the integer values that tell which input indexes which dim."""
        self.samples += samples
        found = tensors_of(arguments)
        for path, tensor in found:
            self.dtypes.setdefault(path, set()).add(dtype_name(tensor.dtype))
            if tensor.dim() >= 2:
                self.layouts.setdefault(path, set()).add(layout_of(tensor))
        if not data or not (for_indexes or self.index_seen < self.index_samples):
            return
        self.index_seen += 1
        sizes = {f"{p}.size()[{a}]": s for p, t in found for a, s in enumerate(t.shape)}
        for path, tensor in found:
            if not _integer(tensor) or tensor.numel() == 0 or self.bounds.get(path, {}) is None:
                continue
            low, high = int(tensor.min()), int(tensor.max())
            if low < 0:
                self.bounds[path] = None
                continue
            own = {f"{path}.size()[{a}]" for a in range(tensor.dim())}
            fits = {dim: size - 1 - high for dim, size in sizes.items() if dim not in own and size > high}
            previous = self.bounds.get(path)
            merged = fits if previous is None else {d: previous[d] + fits[d] for d in previous if d in fits}
            self.bounds[path] = merged or None

    def result(self) -> ScanResult:
        indexes = {}
        for path, slack in self.bounds.items():
            if slack:
                indexes[path] = min(slack, key=lambda d: (slack[d], d))
        return ScanResult(
            dtypes={p: tuple(sorted(v)) for p, v in self.dtypes.items()},
            layouts={p: tuple(sorted(v)) for p, v in self.layouts.items() if len(v) > 1},
            indexes=indexes,
            samples=self.samples,
        )
