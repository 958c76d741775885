"""What a served or benchmarked call is measured with (guardscope bench): waiting for the work
queued on the device, the graphs Dynamo has compiled so far, the accelerator's name."""

from __future__ import annotations

import torch


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on ``device``, so a request's wall time includes its kernels."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def graphs_compiled() -> int:
    """Graphs Dynamo has compiled in this process so far (``counters["stats"]["unique_graphs"]``,
    as the seed article counts them): read before and after a call, it tells whether the call
    compiled, without the structured trace, whose payloads add to a compile's time."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def device_name(device: torch.device) -> str | None:
    """The accelerator's name (``NVIDIA H200``), None on the CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return None
