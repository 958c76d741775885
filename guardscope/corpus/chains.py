"""Calls that carry the model's own state: a request's decode steps get the KV cache its prefill
started and every step since extended.

``generate()`` passes one cache object to every forward call of a request, and the forward
extends it in place: the keys and values a decode step receives are tensors the *compiled*
forward made one step before, laid out as its backend lays them out (a tiny GPT-2's cache keys
have strides (96, 24, 8, 1) after an eager step and (96, 8, 32, 1) after an inductor one).
Dynamo guards on those strides. A corpus holds each call's cache as the recorder saw it, so
running recorded calls one by one hands the compiled forward caches laid out by whatever
produced them in production (eager, when the recording ran the eager backend or production had
fallen back to eager): a warmup built that way compiles graphs production never asks for and
misses the ones it does. :class:`CarriedState` runs a corpus's calls as production runs them
instead: a call whose model state continues the state the previous step of its request was
given gets that live object, as extended by the compiled forward.

Which calls continue which: a corpus whose calls are tagged with their request
(``requests.json``, :mod:`guardscope.corpus.storage.requests`) says so; an untagged one is read in
recorded order (one thread of ``generate()`` calls: each step follows the one before).
Either way a live object replaces the recorded one only where both have the same structure —
the same types, tensor shapes and dtypes and the same plain attributes (``is_initialized``,
lengths): the recorded object says what production passed, the live one only how the backend
laid it out. A prefill (an empty cache) or a step of another request differs and keeps the
recorded object (``CarriedState.kept`` counts those that held state).

Model state is what :func:`guardscope.corpus.values.library_types.is_model_state` recognises: the
caches of ``transformers.cache_utils``. A model that returns its state for the caller to pass
back (legacy tuple caches) is not followed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from .values.library_types import is_model_state, state_tokens
from .storage.requests import RequestRuns

# A structure compared deeper than this is taken as different (never carried).
_DEPTH = 8


@dataclass(frozen=True)
class Chains:
    """What a planner needs to follow a corpus's chains (:func:`chained_order`): its request
    tags (None: untagged), ``holds_state(i)`` (:func:`state_tokens_of` call ``i``) and the
    number of recorded calls."""

    requests: RequestRuns | None
    holds_state: Callable[[int], int | None]
    calls: int


def carries_state(corpus: Any) -> bool:
    """Whether a corpus's calls carry model state (its first call has a state argument)."""
    if not len(corpus):
        return False
    first = corpus.sample(0)
    return bool(state_arguments(first.args, first.kwargs))


def state_arguments(args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments that are model state (``"args[1]"`` or a keyword's name -> value)."""
    found = {f"args[{i}]": value for i, value in enumerate(args) if is_model_state(value)}
    found.update({name: value for name, value in kwargs.items() if is_model_state(value)})
    return found


def structure(value: Any, depth: int = 0) -> Any:
    """What Dynamo sees of ``value`` but the tensors' strides and data: types, tensor shapes,
    dtypes and devices, and plain attributes, nested."""
    import torch

    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype), str(value.device), value.requires_grad)
    if depth > _DEPTH:
        return ("deep", id(value))  # unequal to anything else: not carried
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(structure(item, depth + 1) for item in value))
    if isinstance(value, dict):
        return ("dict", tuple((key, structure(item, depth + 1)) for key, item in value.items()))
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device)):
        return value
    if isinstance(value, type):  # a class a cache keeps (the layer class it makes)
        return ("class", value.__module__, value.__qualname__)
    attributes = getattr(value, "__dict__", None)
    if attributes is None:  # a function, a slot object: its type (never its address)
        return ("object", type(value).__module__, type(value).__qualname__)
    return (type(value).__module__, type(value).__qualname__,
            tuple((name, structure(item, depth + 1)) for name, item in sorted(attributes.items())))


class CarriedState:
    """Calls run in order with the model state they carry taken from the step before.

    ``carry(index, args, kwargs)`` is called for each call, in order, just before it runs, with
    the objects it will run on; it returns the arguments to run it with: each state argument is
    the object the request's previous step was given (extended in place by that step's forward)
    when that object now has the recorded one's structure, else the recorded one. ``tag_of``:
    call index -> ``(request, step)`` or None (``corpus.requests.of``; None: every call is
    untagged and continues the one before)."""

    def __init__(self, tag_of: Callable[[int], tuple[Any, int] | None] | None = None) -> None:
        self.tag_of = tag_of
        self.carried = 0  # state arguments replaced by the live object
        self.kept = 0  # state arguments that held state yet kept the recorded object
        self._live: dict[Any, dict[str, Any]] = {}  # the previous step's state, by request

    @classmethod
    def for_requests(cls, requests: RequestRuns | None) -> CarriedState:
        """Carrying by a corpus's tags (``corpus.requests``), or in recorded order without them."""
        return cls(requests.of if requests is not None else None)

    def _keys(self, index: int) -> tuple[Any, Any]:
        """(where this call's predecessor left its state, where this call leaves it)."""
        tag = self.tag_of(index) if self.tag_of is not None else None
        if tag is None:
            return ("untagged", index - 1), ("untagged", index)
        request, step = tag
        return ("request", request, step - 1), ("request", request, step)

    def carry(self, index: int, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        states = state_arguments(args, kwargs)
        if not states:
            return args, kwargs
        before, here = self._keys(index)
        live = self._live.pop(before, {})
        if before[0] == "untagged":  # only the call just before is continued
            self._live = {key: value for key, value in self._live.items() if key[0] != "untagged"}
        args, kwargs = list(args), dict(kwargs)
        passed = {}
        for where, recorded in states.items():
            value = live.get(where)
            if value is not None and value is not recorded and structure(value) == structure(recorded):
                self.carried += 1
                if where.startswith("args["):
                    args[int(where[5:-1])] = value
                else:
                    kwargs[where] = value
                passed[where] = value
            else:
                if state_tokens(recorded):
                    self.kept += 1
                passed[where] = recorded
        self._live[here] = passed
        return tuple(args), kwargs


def chain_of(index: int, requests: RequestRuns | None, holds_state: Any, calls: int) -> list[int]:
    """The calls to run, in order, for call ``index`` to get its state as production made it and
    for every later step of its request to be warmed up on the state the steps before made: its
    request's steps from the prefill to the last one recorded (``[index]`` alone when it holds
    no state, or its prefill is not found). Under inductor a decode step's cache is laid out by
    the graph that ran the step before, so a request's later steps can need graphs of their own
    for layouts no recording shows: running the whole request compiles them.

    ``holds_state(i)`` -> the number of tokens call ``i``'s state holds (0 at a prefill), or None
    when it holds no state. A tagged call follows its request's steps; an untagged corpus is
    walked in recorded order, back to the nearest call whose state is empty and on while the
    calls after it hold tokens. ``calls``: the recorded calls."""
    tokens = holds_state(index)
    if tokens is None:
        return [index]
    tag = requests.of(index) if requests is not None else None
    if tag is not None:
        request, step = tag
        before, position = [], index
        for earlier in range(step - 1, -1, -1):
            found = _step_at(requests, request, earlier, before=position)
            if found is None:
                return [index]  # a request whose first steps were not recorded: nothing to carry
            before.append(found)
            position = found
        after, position = [], index
        while (found := _step_at(requests, request, step + 1 + len(after), after=position)) is not None:
            after.append(found)
            position = found
        return [*before[::-1], index, *after]
    start = index
    while tokens:  # back to the prefill
        if index - start >= _MAX_UNTAGGED or start == 0:
            return [index]
        start -= 1
        tokens = holds_state(start)
        if tokens is None:
            return [index]
    end = index + 1
    while end < calls and end - start < _MAX_UNTAGGED and holds_state(end):
        end += 1
    return list(range(start, end))


# An untagged request longer than this is not followed: its calls run as recorded.
_MAX_UNTAGGED = 4096


def _step_at(requests: RequestRuns, request: Any, step: int, *, before: int | None = None,
             after: int | None = None) -> int | None:
    """The call that is step ``step`` of ``request``: the latest before ``before``, or the
    earliest after ``after``."""
    found = []
    for tag, first, first_step, count in requests.runs:
        offset = step - first_step
        if tag == request and 0 <= offset < count:
            call = first + offset
            if (before is None or call < before) and (after is None or call > after):
                found.append(call)
    if not found:
        return None
    return max(found) if before is not None else min(found)


def chained_order(samples: Iterable[int], requests: RequestRuns | None, holds_state: Any,
                  calls: int) -> Iterator[tuple[int, str | int, int]]:
    """``samples`` in order, each preceded by the calls of its chain not yet listed
    (:func:`chain_of`): the order a warmup runs them in, as ``(call, request tag, step)`` — the
    tags a warmup corpus is written with so that :class:`CarriedState` carries its chains. The
    corpus's own tag where it has one, ``"chain-<first call>"`` for an untagged chain, and
    ``"call-<call>"`` for a call run alone. Samples from ``calls`` on (probed ones, after the
    corpus) are run alone."""
    listed: set[int] = set()
    for index in samples:
        chain = chain_of(index, requests, holds_state, calls) if index < calls else [index]
        tagged = requests.of(chain[0]) if requests is not None else None
        for step, call in enumerate(chain):
            if call in listed:
                continue
            listed.add(call)
            if len(chain) == 1:
                yield call, f"call-{call}", 0
            elif tagged is not None:
                yield call, tagged[0], tagged[1] + step
            else:
                yield call, f"chain-{chain[0]}", step


def state_tokens_of(args: tuple, kwargs: dict[str, Any]) -> int | None:
    """The tokens the call's first state argument holds (0 at a prefill); None without state."""
    for value in state_arguments(args, kwargs).values():
        return state_tokens(value)
    return None
