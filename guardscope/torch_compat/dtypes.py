"""dtype names: the one spelling of a torch dtype in catalogs, corpus shards and messages."""

from __future__ import annotations

import torch


# Every torch dtype by the name catalogs, corpus shards and messages spell it ("float32"), and back.
DTYPES: dict[str, torch.dtype] = {
    str(value).removeprefix("torch."): value for value in vars(torch).values() if isinstance(value, torch.dtype)
}


_DTYPE_NAMES: dict[torch.dtype, str] = {dtype: name for name, dtype in DTYPES.items()}


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``, the one spelling of a dtype in guardscope's files."""
    name = _DTYPE_NAMES.get(dtype)
    return name if name is not None else str(dtype).removeprefix("torch.")
