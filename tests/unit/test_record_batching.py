"""What a guard-only replay of signature records does once per argument and size instead of once
per record (issue 23, item 4), checked against what it does per record: a call template's frame
locals and descriptions (``replay.record_plan.RecordPlan.frame``), its keys read from a shard's text
(``CallTemplate.match_text``), and the catalog builder's dims (``CatalogBuilder.add_sample``).
Pure: nothing is compiled."""

from __future__ import annotations

import json
import types

import pytest
import torch

from guardscope.catalog.builder import CatalogBuilder
from guardscope.corpus.signatures import call_template
from guardscope.corpus.signatures.call_template import CallTemplate
from guardscope.corpus.signatures.signature import signature, signature_to_json
from guardscope.model import SampleMeta, TensorMeta
from guardscope.replay.arguments import CallBinder, describe
from guardscope.replay.record_plan import RecordPlan, frame_layout


class Scaled(torch.nn.Module):
    def forward(self, x, index, *, mode="sum", mask=None, scale=0.5, bias=None, dtype=torch.float16):
        return x


def call(rows: int, cols: int = 4, edges: int = 3) -> tuple[tuple, dict]:
    return (torch.zeros(rows, cols), torch.zeros(2, edges, dtype=torch.int64)), {
        "scale": 0.25, "mode": "mean", "bias": torch.zeros(cols)}


def compact(args: tuple, kwargs: dict) -> str:
    return json.dumps(signature_to_json(signature(args, kwargs, inference=False)), separators=(",", ":"))


SIZES = [(5, 4, 3), (5, 4, 3), (7, 4, 3), (5, 1, 9), (0, 4, 0), (7, 4, 3), (1, 1, 1), (5, 4, 3), (9, 2, 3)]


@pytest.mark.parametrize("kept", [4096, 2])  # 2: the template drops its tensors every few records
def test_a_records_frame_and_description_are_those_of_its_arguments(monkeypatch, kept):
    monkeypatch.setattr(call_template, "TEMPLATE_TENSORS_KEPT", kept)
    model = Scaled()
    binder = CallBinder(model)
    template = CallTemplate(signature(*call(5), inference=False))
    args, kwargs, tensors = template.arguments(template.match(json.loads(compact(*call(5)))))
    plan = RecordPlan.of(types.SimpleNamespace(binder=binder), template, args, kwargs, tensors)
    assert plan.framed
    for index, sizes in enumerate(SIZES):
        key, _ = template.match_text(compact(*call(*sizes)), 0)
        frame, described = plan.frame(template, key)
        args, kwargs, _ = template.arguments(key)  # the same shared tensors, as a record's check had them
        expected = binder.frame_locals(args, kwargs)
        assert list(frame) == list(expected)  # the same locals, in the same order...
        assert all(frame[name] is expected[name] for name in expected)  # ...the same objects
        assert [tuple(frame[name].shape) for name in ("x", "index")] == [(sizes[0], sizes[1]), (2, sizes[2])]
        made = plan.described(described, index, "0/1")
        assert made == describe(binder.named_or_positional(args, kwargs), index, "0/1", None, recorded="signature")


def test_a_frame_whose_tensors_are_not_each_a_local_of_their_own_has_no_layout():
    x, y = torch.zeros(2), torch.zeros(3)
    assert frame_layout({"self": 1, "y": y, "x": x, "k": 0.5}, [x, y]) == (("self", "y", "x", "k"), [1, y, x, 0.5],
                                                                            [(1, 1), (2, 0)])
    assert frame_layout({"args": (x, y)}, [x, y]) is None  # *args: a tuple built per call
    assert frame_layout({"x": x, "kwargs": {"y": y}}, [x, y]) is None
    assert frame_layout({"x": x, "y": y, "both": [[x]]}, [x, y]) is None  # also held in a container
    assert frame_layout({"x": x, "again": x}, [x]) is None


def test_keys_read_from_text_convert_each_distinct_tensor_part_once_and_equal_the_arrays(monkeypatch):
    monkeypatch.setattr(call_template, "TEXT_PARTS_KEPT", 3)  # starts afresh every few records
    template = CallTemplate(signature((torch.zeros(()), torch.zeros(4, 2)), {"n": 3}, inference=False))
    for rows in (4, 4, 0, 123456789, 4, 1, 0, 4):
        for n in (3, -12, 0):
            args, kwargs = (torch.zeros(()), torch.zeros(rows, 2)[:, :1]), {"n": n}
            text = compact(args, kwargs)
            key, end = template.match_text(text, 0)
            assert end == len(text) and key == template.match(json.loads(text))
            assert key[0] == (0,) and key[2] == n  # a 0-dim tensor: its offset alone
    key, _ = template.match_text(compact((torch.zeros(()), torch.zeros(4, 2)[1:, 1:]), {"n": 3}), 0)
    assert key[1] == (3, 1, 2, 1, 3)  # a view: sizes, strides and offset


def sample(index: int, shapes: dict[str, tuple[int, ...]]) -> SampleMeta:
    return SampleMeta(index=index, tensors=tuple((path, TensorMeta(shape, (), "float32", "cpu", False))
                                                 for path, shape in shapes.items()),
                      lengths=(), scalars=(), serving="0/0")


class _NeverKept(dict):
    def __setitem__(self, key, value):  # every (path, shape) pair is new to the builder
        pass


def test_the_builders_dims_do_not_depend_on_which_shapes_it_has_seen():
    """A (path, shape) seen before costs one lookup; the dims, equalities and first shapes are
    those of a builder that never remembers a pair."""
    samples = [sample(i, shapes) for i, shapes in enumerate([  # edges dim 1 is always x dim 0
        {"x": (5, 4), "edges": (2, 5)},
        {"x": (5, 4), "edges": (2, 5)},
        {"x": (5, 4, 1), "edges": (2, 5)},  # x gains a dim
        {"x": (3, 4), "edges": (2, 3)},  # a pair first seen once x has three dims' names
        {"x": (3, 4), "edges": (2, 3)},
        {"x": (4, 4), "edges": (2, 4)},
        {"x": (0, 4), "edges": (2, 0), "mask": (0,)},
        {"x": (5, 4), "edges": (2, 5)},
        {"x": (1, 4), "edges": (2, 1), "mask": (1,)},
        {"x": (3, 4), "edges": (2, 3)},
    ])]
    batched, unbatched = CatalogBuilder(), CatalogBuilder()
    unbatched._shapes_seen = _NeverKept()
    for meta in samples:
        batched.add_sample(meta)
        unbatched.add_sample(meta)
    assert len(batched._shapes_seen) == 13  # distinct (path, shape) pairs
    assert batched.dimensions() == unbatched.dimensions()
    assert batched.to_state() == unbatched.to_state()
    by_dim = {d.dim: d for d in batched.dimensions()}
    assert (by_dim["x.size()[0]"].min, by_dim["x.size()[0]"].max) == (0, 5)
    assert by_dim["x.size()[2]"].min == by_dim["x.size()[2]"].max == 1
    assert by_dim["edges.size()[1]"].ever_zero and by_dim["edges.size()[1]"].ever_one
    assert by_dim["x.size()[0]"].equal_to == ("edges.size()[1]", "mask.size()[0]")
