"""Calls that carry model state (guardscope.corpus.chains), on transformers' real DynamicCache:
which call continues which, and when the live cache replaces the recorded one. No compile."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from guardscope.corpus.chains import CarriedState, chain_of, chained_order, state_arguments, state_tokens_of, structure
from guardscope.corpus.storage.requests import RequestRuns


def _cache(tokens: int, *, transposed: bool = False) -> DynamicCache:
    """A one-layer cache holding ``tokens`` tokens (batch 1, 2 heads, head dim 4); ``transposed``:
    the same shapes laid out as another backend lays them out (other strides)."""
    cache = DynamicCache()
    if tokens:
        cache.update(torch.randn(1, 2, tokens, 4), torch.randn(1, 2, tokens, 4), 0)
        if transposed:  # (update() copies into its own layout: set the layer's tensors directly)
            layer = cache.layers[0]
            layer.keys, layer.values = (torch.randn(1, tokens, 2, 4).transpose(1, 2) for _ in range(2))
    return cache


def _extend(cache: DynamicCache, tokens: int = 1) -> None:
    """What a decode step's forward does to the cache it is given: extends it in place."""
    cache.update(torch.randn(1, 2, tokens, 4), torch.randn(1, 2, tokens, 4), 0)


def test_state_is_a_cache_in_any_argument_and_its_tokens_are_counted():
    cache = _cache(3)
    assert state_arguments((torch.ones(2), cache), {"cache": _cache(0), "x": torch.ones(1)}).keys() == {
        "args[1]", "cache"}
    assert state_tokens_of((), {"cache": cache}) == 3
    assert state_tokens_of((), {"cache": _cache(0)}) == 0
    assert state_tokens_of((torch.ones(2),), {}) is None


def test_structure_sees_shapes_and_flags_not_strides():
    assert _cache(3).layers[0].keys.stride() != _cache(3, transposed=True).layers[0].keys.stride()
    assert structure(_cache(3)) == structure(_cache(3, transposed=True))
    assert structure(_cache(3)) != structure(_cache(4))
    assert structure(_cache(0)) != structure(_cache(3))  # is_initialized differs


def test_a_decode_step_gets_the_cache_its_previous_step_extended_and_nothing_else():
    runs = RequestRuns()
    for index, (request, step) in enumerate([("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2)]):
        runs.add(index, request, step)
    carried = CarriedState(runs.of)
    prefill_a, prefill_b = _cache(0), _cache(0)
    _, kwargs = carried.carry(0, (), {"cache": prefill_a})
    assert kwargs["cache"] is prefill_a  # a prefill starts its request's state
    cache_a = kwargs["cache"]
    cache_a.update(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), 0)  # the prefill's forward: 3 tokens
    _, kwargs = carried.carry(1, (), {"cache": prefill_b})
    kwargs["cache"].update(torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4), 0)

    recorded = _cache(3, transposed=True)  # a's step 1 as recorded: another backend's layout
    _, kwargs = carried.carry(2, (), {"cache": recorded})
    assert kwargs["cache"] is prefill_a and carried.carried == 1
    _extend(kwargs["cache"])
    # b's step 1 was recorded with 5 tokens: b's own prefill cache, never a's.
    _, kwargs = carried.carry(3, (), {"cache": _cache(5)})
    assert kwargs["cache"] is prefill_b and carried.carried == 2
    # A recorded step that does not continue its predecessor (here 9 tokens, not 4) keeps its own.
    mismatched = _cache(9)
    _, kwargs = carried.carry(4, (), {"cache": mismatched})
    assert kwargs["cache"] is mismatched and (carried.carried, carried.kept) == (2, 1)


def test_untagged_calls_continue_only_the_call_just_before():
    carried = CarriedState()
    _, kwargs = carried.carry(0, (), {"cache": _cache(0)})
    kwargs["cache"].update(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), 0)
    live = kwargs["cache"]
    carried.carry(1, (torch.ones(1),), {})  # a call without state between
    _, kwargs = carried.carry(2, (), {"cache": _cache(3)})
    assert kwargs["cache"] is not live and carried.kept == 1


def test_a_warmup_order_runs_each_decode_step_within_its_whole_request():
    tokens = {0: 0, 1: 3, 2: 4, 3: 0, 4: 3, 5: None}  # two requests of generate(), then a call without state
    runs = RequestRuns()
    for index, (request, step) in enumerate([("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]):
        runs.add(index, request, step)
    assert chain_of(1, runs, tokens.get, 6) == [0, 1, 2]  # from the prefill to the request's last step
    assert chain_of(1, None, tokens.get, 6) == [0, 1, 2]  # untagged: walked back to the empty cache, on
    assert chain_of(3, runs, tokens.get, 6) == [3, 4]
    assert chain_of(5, runs, tokens.get, 6) == [5]
    assert list(chained_order([4, 1, 2, 5], runs, tokens.get, calls=6)) == [
        (3, "b", 0), (4, "b", 1), (0, "a", 0), (1, "a", 1), (2, "a", 2), (5, "call-5", 0)]
    assert list(chained_order([2], None, tokens.get, calls=6)) == [(0, "chain-0", 0), (1, "chain-0", 1),
                                                                   (2, "chain-0", 2)]
    assert list(chained_order([7], runs, tokens.get, calls=6)) == [(7, "call-7", 0)]  # probed: after the corpus


def test_interleaved_requests_are_followed_by_their_tags():
    runs = RequestRuns()
    for index, (request, step) in enumerate([("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2)]):
        runs.add(index, request, step)
    tokens = {0: 0, 1: 0, 2: 3, 3: 5, 4: 4}
    assert chain_of(2, runs, tokens.get, 5) == [0, 2, 4]
    assert chain_of(1, runs, tokens.get, 5) == [1, 3]
    missing = RequestRuns()
    missing.add(0, "a", 3)  # recorded from its fourth step on: no prefill to start from
    assert chain_of(0, missing, {0: 7}.get, 1) == [0]
