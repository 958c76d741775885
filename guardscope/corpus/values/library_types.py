"""Built-in codecs (see :mod:`guardscope.corpus.values.structured`) for the objects libraries pass to a
compiled forward: transformers caches and cache layers, torch_geometric ``Data``, ``HeteroData``
and ``Batch``. Each library's codecs are registered the first time one of its values or names is
met, and only when the library is installed: guardscope does not import either otherwise.

* **transformers**: every cache class (``DynamicCache``, ``StaticCache``, ``EncoderDecoderCache``,
  ``QuantizedCache`` ...) and cache layer class (``DynamicLayer``, ``DynamicSlidingWindowLayer``,
  ``StaticLayer`` ...) of ``transformers.cache_utils``, as ``transformers.<ClassName>``: state =
  the object's attributes (a cache's ``layers``, a layer's ``keys``, ``values``,
  ``is_initialized``, ``cumulative_length`` ...), with static-address marks kept, rebuilt
  without running ``__init__``: Dynamo sees the same attributes, tensors and marks, so the same
  guards. A cache holding something else (a quantizer object) is refused, naming it.
* **torch_geometric**: ``torch_geometric.Data`` (its attributes in order),
  ``torch_geometric.HeteroData`` (global, node and edge stores in order) and
  ``torch_geometric.Batch`` (a ``Batch`` of ``Data`` or ``HeteroData``: its attributes, ``batch``
  and ``ptr`` among them, the number of graphs and the slice and increment tables that
  ``to_data_list`` reads).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from .codecs import BY_TYPE, Codec, add_codec, attributes_codec, library_installed

TRANSFORMERS, PYG = "transformers.", "torch_geometric."
_done: set[str] = set()


def register_for_type(cls: type) -> bool:
    """Register the codecs of the library ``cls`` comes from, when it is one of them. True when
    something was registered now."""
    module = cls.__module__ or ""
    if module.startswith("transformers") and "transformers" in sys.modules:
        return _register("transformers")
    if "torch_geometric" in sys.modules and _is_pyg_data(cls):
        return _register("torch_geometric")
    return False


def register_for_name(name: str) -> bool:
    """Register the codecs of the library a corpus's type name belongs to, when it is installed."""
    for prefix in (TRANSFORMERS, PYG):
        if name.startswith(prefix) and library_installed(prefix[:-1]):
            return _register(prefix[:-1])
    return False


def _register(library: str) -> bool:
    if library in _done:
        return False
    _done.add(library)
    if library == "transformers":
        _register_transformers()
    else:
        _register_pyg()
    return True


# --- transformers ---------------------------------------------------------------------------------


def _register_transformers() -> None:
    from transformers import cache_utils

    bases = tuple(getattr(cache_utils, name) for name in ("Cache", "CacheLayerMixin") if hasattr(cache_utils, name))
    for name, cls in sorted(vars(cache_utils).items()):
        if isinstance(cls, type) and issubclass(cls, bases) and cls.__module__ == cache_utils.__name__:
            add_codec(attributes_codec(cls, TRANSFORMERS + name))


def is_model_state(value: Any) -> bool:
    """Whether ``value`` is state the model extends in place and its caller passes again: a cache
    of ``transformers.cache_utils`` (:mod:`guardscope.corpus.chains`). transformers is not
    imported for it: a value of its classes means it is loaded."""
    cache_utils = sys.modules.get("transformers.cache_utils")
    base = getattr(cache_utils, "Cache", None) if cache_utils is not None else None
    return base is not None and isinstance(value, base)


def state_tokens(value: Any) -> int | None:
    """The tokens model state holds (0: a prefill's empty cache); None when it cannot say."""
    try:
        tokens = value.get_seq_length()
    except Exception:  # a cache class without it, or one that needs what a recording lacks
        return None
    return int(tokens) if isinstance(tokens, int) or hasattr(tokens, "__int__") else None


# --- torch_geometric ------------------------------------------------------------------------------


def _is_pyg_data(cls: type) -> bool:
    from torch_geometric.data import Data, HeteroData

    return issubclass(cls, (Data, HeteroData))


def _register_pyg() -> None:
    from torch_geometric.data import Batch, Data, HeteroData

    def data_to_state(value: Any) -> Any:
        return dict(value._store._mapping)

    def fill_data(data: Any, state: Any) -> Any:
        if type(state) is not dict:
            raise ValueError("a Data's state is the dict of its attributes")
        for key, item in state.items():  # in the recorded order: Dynamo guards the keys' order
            setattr(data, key, item)
        return data

    def hetero_to_state(value: Any) -> Any:
        return {
            "global": dict(value._global_store._mapping),
            "nodes": [[key, dict(store._mapping)] for key, store in value._node_store_dict.items()],
            "edges": [[list(key), dict(store._mapping)] for key, store in value._edge_store_dict.items()],
        }

    def fill_hetero(data: Any, state: Any) -> Any:
        if type(state) is not dict or sorted(state) != ["edges", "global", "nodes"]:
            raise ValueError("a HeteroData's state holds its global, node and edge stores")
        fill_data(data, state["global"])
        for key, mapping in state["nodes"]:
            fill_data(data[key], mapping)
        for key, mapping in state["edges"]:
            fill_data(data[tuple(key)], mapping)
        return data

    def batch_to_state(value: Any) -> Any:
        hetero = isinstance(value, HeteroData)
        return {
            "base": "HeteroData" if hetero else "Data",
            "data": hetero_to_state(value) if hetero else data_to_state(value),
            "num_graphs": value._num_graphs if hasattr(value, "_num_graphs") else None,
            "slice_dict": _tables(getattr(value, "_slice_dict", None)),
            "inc_dict": _tables(getattr(value, "_inc_dict", None)),
        }

    def batch_from_state(state: Any) -> Any:
        if type(state) is not dict or state.get("base") not in ("Data", "HeteroData"):
            raise ValueError("a Batch's state names its base class, Data or HeteroData")
        hetero = state["base"] == "HeteroData"
        batch = Batch(_base_cls=HeteroData if hetero else Data)
        (fill_hetero if hetero else fill_data)(batch, state["data"])
        for key in ("num_graphs", "slice_dict", "inc_dict"):
            if state.get(key) is not None:
                setattr(batch, f"_{key}", _untables(state[key]))
        return batch

    def data_parts(state: Any) -> Iterator[tuple[str, Any]]:
        yield from ((f".{key}", item) for key, item in state.items())

    def hetero_parts(state: Any) -> Iterator[tuple[str, Any]]:
        yield from data_parts(state["global"])
        for key, mapping in state["nodes"]:
            yield from ((f"[{key!r}].{name}", item) for name, item in mapping.items())
        for key, mapping in state["edges"]:
            yield from ((f"[{tuple(key)!r}].{name}", item) for name, item in mapping.items())

    def batch_parts(state: Any) -> Iterator[tuple[str, Any]]:
        yield from (hetero_parts if state["base"] == "HeteroData" else data_parts)(state["data"])
        if state["num_graphs"] is not None:
            yield ".num_graphs", state["num_graphs"]

    add_codec(Codec(PYG + "Data", Data, data_to_state, lambda state: fill_data(Data(), state), data_parts))
    add_codec(Codec(PYG + "HeteroData", HeteroData, hetero_to_state, lambda state: fill_hetero(HeteroData(), state),
               hetero_parts))
    batch = Codec(PYG + "Batch", Batch, batch_to_state, batch_from_state, batch_parts)
    add_codec(batch)
    # Batch(_base_cls=Data) makes instances of a class made on first use (DataBatch, HeteroDataBatch).
    for base in (Data, HeteroData):
        BY_TYPE[type(Batch(_base_cls=base))] = batch


def _tables(tables: Any) -> Any:
    """A batch's slice or increment tables (attribute -> tensor; per node or edge type for a
    heterogeneous batch, keyed by tuples) in storable form."""
    if tables is None:
        return None
    return [[list(key) if type(key) is tuple else key, _tables(item) if type(item) is dict else item]
            for key, item in tables.items()]


def _untables(stored: Any) -> Any:
    if type(stored) is not list:
        return stored
    return {tuple(key) if type(key) is list else key: _untables(item) if type(item) is list else item
            for key, item in stored}

