"""A call's signature (guardscope.corpus.signatures.signature): equal for calls that differ only in tensor
data, different wherever a frame-0 guard could tell them apart."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from guardscope.corpus.signatures.signature import signature, signature_digest


def sig(*args, **kwargs):
    return signature(args, kwargs)


def test_tensor_data_does_not_count():
    assert sig(torch.randn(4, 3), y=torch.zeros(2)) == sig(torch.ones(4, 3), y=torch.full((2,), 7.0))
    assert signature_digest(sig(torch.randn(4, 3))) == signature_digest(sig(torch.ones(4, 3)))


def test_a_signature_is_hashable_and_its_digest_stable():
    value = sig(torch.ones(2, 2), [1, 2.5, None], {"k": torch.ones(1)}, flag=True)
    assert hash(value) == hash(sig(torch.ones(2, 2), [1, 2.5, None], {"k": torch.ones(1)}, flag=True))
    digest = signature_digest(value)
    assert len(digest) == 16 and int(digest, 16) >= 0
    assert digest == signature_digest(sig(torch.ones(2, 2), [1, 2.5, None], {"k": torch.ones(1)}, flag=True))


base = torch.ones(4, 6)


@pytest.mark.parametrize("left,right", [
    ((torch.ones(4, 6),), (torch.ones(4, 7),)),                                   # sizes
    ((torch.ones(4, 6),), (torch.ones(6, 4).t(),)),                               # strides
    ((torch.ones(4, 6),), (torch.ones(1, 6).expand(4, 6),)),                      # a zero stride
    ((base[1:3],), (torch.ones(2, 6),)),                                          # storage offset
    ((torch.ones(4, 6),), (torch.ones(4, 6, dtype=torch.float16),)),              # dtype
    ((torch.ones(4, 6),), (torch.ones(4, 6, requires_grad=True),)),               # requires_grad
    ((torch.ones(2),), (torch.ones(2).to_sparse(),)),                              # layout
    ((base, base), (torch.ones(4, 6), torch.ones(4, 6))),                         # aliasing
    ((base, base[0]), (base, torch.ones(6))),                                     # a view aliases its base
    ((torch.ones(2), None), (torch.ones(2), torch.ones(2))),                       # None or a tensor
    ((torch.ones(2),), (torch.ones(2), None)),                                     # an extra argument
    (([torch.ones(2)] * 2,), ([torch.ones(2)] * 3,)),                             # list length
    (([torch.ones(2), torch.ones(3)],), ((torch.ones(2), torch.ones(3)),)),        # list or tuple
    (({"a": torch.ones(2)},), ({"b": torch.ones(2)},)),                            # dict keys
    (({"a": 1, "b": 2},), ({"b": 2, "a": 1},)),                                    # dict key order
    ((1,), (2,)),                                                                   # int value
    ((1,), (1.0,)),                                                                 # int or float
    ((1,), (True,)),                                                                # int or bool
    ((0.0,), (-0.0,)),                                                              # float sign
    ((torch.float32,), (torch.float16,)),                                           # a dtype argument
    (("mean",), ("sum",)),                                                          # a string argument
])
def test_what_a_guard_can_see_makes_signatures_differ(left, right):
    assert signature(left, {}) != signature(right, {})
    assert signature_digest(signature(left, {})) != signature_digest(signature(right, {}))


def test_keywords_count_by_name_and_order():
    assert sig(x=torch.ones(2), y=torch.ones(3)) != sig(x=torch.ones(3), y=torch.ones(2))
    assert sig(x=torch.ones(2), y=torch.ones(3)) != sig(y=torch.ones(3), x=torch.ones(2))
    assert sig(torch.ones(2)) != sig(x=torch.ones(2))


def test_inference_tensors_differ_from_normal_ones():
    with torch.inference_mode():
        inference = torch.ones(3)
    assert sig(inference) != sig(torch.ones(3))


def test_empty_tensors_alias_nothing():
    """Tensors without storage bytes share no data a guard could rely on."""
    assert sig(torch.ones(0, 3), torch.ones(0, 3)) == sig(torch.empty(0, 3), torch.zeros(0, 3))


def test_nan_equals_nan_and_objects_count_by_type():
    assert sig(float("nan")) == sig(float("nan"))

    @dataclasses.dataclass
    class Batch:
        x: torch.Tensor
        n: int

    assert sig(Batch(torch.ones(2), 1)) == sig(Batch(torch.zeros(2), 1))
    assert sig(Batch(torch.ones(2), 1)) != sig(Batch(torch.ones(2), 2))
    assert sig(object()) == sig(object()) != sig(Batch(torch.ones(2), 1))


# --- the serving thread's cheap key (issue 37) ----------------------------------------------------

FLAT_CALLS = [
    (torch.ones(4, 6),), (torch.ones(4, 7),), (torch.ones(6, 4).t(),), (torch.ones(1, 6).expand(4, 6),),
    (base[1:3],), (torch.ones(2, 6),), (torch.ones(4, 6, dtype=torch.float16),),
    (torch.ones(4, 6, requires_grad=True),), (base, base), (torch.ones(4, 6), torch.ones(4, 6)),
    (base, base[0]), (base, torch.ones(6)), (base[0], base), (torch.ones(2), None), (torch.ones(2),),
    (1,), (2,), (1.0,), (True,), (0.0,), (-0.0,), (float("nan"),), ("mean",), ("sum",),
    (torch.ones(0, 3),), (base[:0],), (base[:0], base),  # empty: a view of a storage, or none
    (torch.ones(2, 3).t().contiguous().t(),), (torch.ones(3, 2).t(),),
]


def test_the_cheap_key_determines_the_signature_and_tells_apart_what_it_tells_apart():
    """Issue 37: a TrafficRecorder finds a call's signature by its call_key: equal keys must mean
    equal signatures (else a wrong signature is recorded), and calls whose signatures differ must
    get different keys."""
    from guardscope.corpus.signatures.signature import call_key

    calls = [(args, {}) for args in FLAT_CALLS] + [((torch.ones(2),), {"y": torch.ones(3), "z": 1}),
                                                   ((torch.ones(2),), {"z": 1, "y": torch.ones(3)})]
    for left_args, left_kwargs in calls:
        left_key = call_key(left_args, left_kwargs)
        assert left_key is not None
        for right_args, right_kwargs in calls:
            same_key = left_key == call_key(right_args, right_kwargs)
            same_signature = (signature(left_args, left_kwargs, inference=False)
                              == signature(right_args, right_kwargs, inference=False))
            assert same_key == same_signature, (left_args, right_args)
    # new tensors of the same layout: the same key (it never holds a pointer)
    assert call_key((torch.ones(4, 6), torch.ones(4, 6)), {}) == call_key((torch.zeros(4, 6), torch.zeros(4, 6)), {})


@pytest.mark.parametrize("call", [([torch.ones(2)],), ({"a": torch.ones(2)},), (torch.ones(2).to_sparse(),),
                                  (torch.nn.Parameter(torch.ones(2)),), (torch.ones(2, device="meta"),),
                                  (torch.float32,)])
def test_a_call_that_is_not_flat_has_no_cheap_key(call):
    from guardscope.corpus.signatures.signature import call_key

    assert call_key(call, {}) is None
