"""Input transforms (guardscope.fixes.transforms) and the output comparison of what-if replays
(guardscope.fixes.whatif): specs parsed, bad input refused in one line, transforms applied to
real tensors by argument path, padded outputs cut back. Nothing here compiles; the replays are
in tests/integration/test_whatif.py."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from guardscope import cli
from guardscope.errors import TransformError
from guardscope.fixes.transforms import (
    Cast,
    Function,
    Layout,
    Pad,
    Padded,
    apply_chain,
    check_transforms,
    input_elements,
    parse_transform,
    parse_transforms,
)
from guardscope.fixes.whatif import compare_outputs, rows_of
from guardscope.model import Sample


class Decoder(torch.nn.Module):
    def forward(self, input_ids, attention_mask=None, extras=()):
        return input_ids


class Images(torch.nn.Module):
    def forward(self, images):
        return images


def call_of(model, *args, **kwargs):
    return check_transforms(model, (), Sample(0, args, kwargs))


# --- parsing ---------------------------------------------------------------------------------------


def test_specs_parse_into_transforms():
    assert parse_transform("cast:images:float32:scale") == Cast(spec="cast:images:float32:scale", path="images",
                                                                 dtype="float32", scale=True)
    assert parse_transform("cast:x:torch.bfloat16").dtype == "bfloat16"
    assert parse_transform("channels_last:images") == Layout(spec="channels_last:images", path="images",
                                                             channels_last=True)
    assert not parse_transform("contiguous:xs[0]").channels_last
    pad = parse_transform("pad:input_ids:1:multiple=64:with=attention_mask:value=0:side=left")
    assert pad == Pad(spec=pad.spec, path="input_ids", dims=(1,), multiple=64, value=0, side="left",
                      companions=("attention_mask",))
    buckets = parse_transform("pad:images:0:buckets=8,1,4,2:value=-1.5")
    assert (buckets.buckets, buckets.multiple, buckets.value, buckets.side) == ((1, 2, 4, 8), None, -1.5, "right")
    assert parse_transform("pad:images:2,3:multiple=32").dims == (2, 3)
    assert parse_transform("fn:canon.py:canonicalise") == Function(spec="fn:canon.py:canonicalise",
                                                                   target="canon.py:canonicalise")


@pytest.mark.parametrize(("spec", "message"), [
    ("cast:images:floaty32", "torch has no dtype 'floaty32'"),
    ("cast:images:Tensor", "torch has no dtype 'Tensor'"),
    ("pad:input_ids:1:multiple=0", "the pad multiple 0 is below 1"),
    ("pad:input_ids:1:multiple=-64", "the pad multiple -64 is below 1"),
    ("pad:images:0:buckets=0,2", "bucket 0 is below 1"),
    ("pad:x:1", "pad takes PATH:DIMS"),
    ("pad:x:1:value=0", "give multiple=N or buckets=A,B,... (one of them)"),
    ("pad:x:1:multiple=4:buckets=1,2", "give multiple=N or buckets=A,B,... (one of them)"),
    ("pad:x:one:multiple=4", "dim 'one' is not a whole number"),
    ("pad:x:1,1:multiple=4", "name a dim twice"),
    ("pad:x:1:multiple=4:side=middle", "side 'middle' is not right or left"),
    ("pad:x:1:multiple=4:value=zero", "value 'zero' is not a number"),
    ("pad:x:1:multiple=4:multiple=8", "multiple= is given twice"),
    ("pad:x:1:multiple=4:width=3", "'width=3' is not multiple=, buckets=, value=, side= or with="),
    ("pad:x:1:multiple=4:with=x", "with=x is the padded argument itself"),
    ("squash:x", "'squash' is not one of cast, contiguous, channels_last, pad, fn"),
    ("cast:x", "cast takes PATH:DTYPE"),
    ("cast:x:float32:round", "cast takes PATH:DTYPE"),
    ("cast:x:int64:scale", ":scale divides by 255, which needs a floating dtype, not int64"),
    ("contiguous:x:1", "contiguous takes only PATH"),
    ("contiguous:x.keys", "'x.keys' is not an argument path"),
    ("contiguous:", "it names nothing"),
    ("fn:canon.py", "fn: needs FILE.py:NAME"),
])
def test_bad_specs_are_refused_in_one_line(spec, message):
    with pytest.raises(TransformError) as raised:
        parse_transform(spec)
    assert message in str(raised.value)
    assert str(raised.value).startswith(f"--transform {spec}: ") and "\n" not in str(raised.value)


def test_no_transform_at_all_is_refused():
    with pytest.raises(TransformError, match="at least one --transform"):
        parse_transforms(())


@pytest.mark.parametrize(("spec", "message"), [
    ("pad:input_idz:1:multiple=64", "forward has no argument 'input_idz' (it has: attention_mask, extras, input_ids)"),
    ("pad:input_ids:2:multiple=64", "input_ids has 2 dims in sample 0 (shape (2, 5)): there is no dim 2"),
    ("pad:input_ids:1:multiple=64:with=extras", "extras is a str in sample 0, not a tensor"),
    ("channels_last:input_ids", "input_ids has 2 dims in sample 0 (shape (2, 5)): channels-last needs 4"),
])
def test_arguments_and_dims_are_checked_on_the_first_sample(spec, message):
    sample = Sample(0, (), {"input_ids": torch.zeros(2, 5, dtype=torch.long), "attention_mask": None, "extras": "all"})
    with pytest.raises(TransformError) as raised:
        check_transforms(Decoder(), (parse_transform(spec),), sample)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_an_optional_argument_the_first_sample_lacks_is_not_refused():
    sample = Sample(0, (torch.zeros(2, 5),), {})
    check_transforms(Decoder(), (parse_transform("pad:attention_mask:1:multiple=8"),), sample)


# --- applying ---------------------------------------------------------------------------------------


def test_right_padding_to_a_multiple_pads_the_mask_with_zeros():
    ids = torch.arange(10).view(2, 5)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    call = call_of(Decoder(), ids, mask)
    pad = parse_transform("pad:input_ids:1:multiple=8:value=7:with=attention_mask")
    args, kwargs, (applied,) = apply_chain(call, (pad,), (ids, mask), {}, 3)
    new_ids, new_mask = args
    assert new_ids.shape == (2, 8) and torch.equal(new_ids[:, :5], ids) and (new_ids[:, 5:] == 7).all()
    assert torch.equal(new_mask[:, :5], mask) and (new_mask[:, 5:] == 0).all() and new_mask.dtype == mask.dtype
    assert applied.padded == [Padded("input_ids", 1, 5, 8, "right"), Padded("attention_mask", 1, 5, 8, "right")]
    assert ids.shape == (2, 5) and mask.shape == (2, 5)  # the call's own tensors are left alone
    assert input_elements(args, kwargs) == 32 and input_elements((ids, mask), {}) == 20


def test_left_padding_and_keyword_arguments():
    ids = torch.ones(1, 3, dtype=torch.long)
    call = call_of(Decoder(), input_ids=ids)
    pad = parse_transform("pad:input_ids:-1:multiple=4:side=left")
    args, kwargs, _ = apply_chain(call, (pad,), (), {"input_ids": ids}, 0)
    assert args == () and kwargs["input_ids"].tolist() == [[0, 1, 1, 1]]


def test_batch_buckets_add_zero_rows_and_leave_larger_batches():
    call = call_of(Images(), torch.zeros(3, 3, 8, 8))
    bucket = parse_transform("pad:images:0:buckets=1,2,4")
    (padded,), _, (applied,) = apply_chain(call, (bucket,), (torch.ones(3, 3, 8, 8),), {}, 0)
    assert padded.shape == (4, 3, 8, 8) and (padded[3] == 0).all() and (padded[:3] == 1).all()
    assert applied.padded == [Padded("images", 0, 3, 4, "right")] and applied.over == 0
    (large,), _, (over,) = apply_chain(call, (bucket,), (torch.ones(6, 3, 8, 8),), {}, 1)
    assert large.shape == (6, 3, 8, 8) and over.over == 1 and over.padded == []


def test_padding_keeps_a_channels_last_layout():
    images = torch.rand(2, 3, 30, 30).contiguous(memory_format=torch.channels_last)
    call = call_of(Images(), images)
    (padded,), _, _ = apply_chain(call, (parse_transform("pad:images:2,3:multiple=32"),), (images,), {}, 0)
    assert padded.shape == (2, 3, 32, 32) and padded.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(padded[:, :, :30, :30], images)


def test_cast_scales_uint8_and_layouts_change_strides_not_values():
    pixels = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
    call = call_of(Images(), pixels)
    chain = tuple(parse_transforms(["cast:images:float32:scale", "channels_last:images"]))
    (images,), _, _ = apply_chain(call, chain, (pixels,), {}, 0)
    assert images.dtype == torch.float32 and torch.equal(images, pixels.float() / 255)
    assert images.is_contiguous(memory_format=torch.channels_last) and not images.is_contiguous()
    (half,), _, _ = apply_chain(call, (parse_transform("cast:images:float16:scale"),), (torch.ones(1, 3),), {}, 0)
    assert half.dtype == torch.float16 and half.tolist() == [[1, 1, 1]]  # only uint8 is scaled
    (back,), _, _ = apply_chain(call, (parse_transform("contiguous:images"),), (images,), {}, 0)
    assert back.is_contiguous() and torch.equal(back, images)


def test_paths_reach_into_lists_and_dicts_without_changing_them():
    extras = [torch.zeros(2), {"mask": torch.ones(3)}]
    call = call_of(Decoder(), torch.zeros(1, 2), extras=extras)
    chain = tuple(parse_transforms(["pad:extras[0]:0:multiple=4", "cast:extras[1]['mask']:int64"]))
    _, kwargs, _ = apply_chain(call, chain, (torch.zeros(1, 2),), {"extras": extras}, 0)
    assert kwargs["extras"][0].shape == (4,) and kwargs["extras"][1]["mask"].dtype == torch.int64
    assert extras[0].shape == (2,) and extras[1]["mask"].dtype == torch.float32


def test_a_companion_of_another_size_is_refused_with_its_sample():
    call = call_of(Decoder(), torch.zeros(1, 5), torch.ones(1, 4))
    pad = parse_transform("pad:input_ids:1:multiple=8:with=attention_mask")
    with pytest.raises(TransformError, match=r"sample 9: attention_mask has shape \(1, 4\), input_ids has 5 on dim 1"):
        apply_chain(call, (pad,), (torch.zeros(1, 5), torch.ones(1, 4)), {}, 9)


def test_a_user_function_transforms_the_call(tmp_path):
    (tmp_path / "canon.py").write_text(
        "def nchw(args, kwargs):\n"
        "    (images,) = args\n"
        "    return (images.permute(0, 3, 1, 2).contiguous(),), kwargs\n"
        "def broken(args, kwargs):\n"
        "    return args\n")
    images = torch.rand(2, 8, 8, 3)
    call = call_of(Images(), images)
    (nchw,), _, _ = apply_chain(call, (parse_transform(f"fn:{tmp_path}/canon.py:nchw"),), (images,), {}, 0)
    assert nchw.shape == (2, 3, 8, 8)
    with pytest.raises(TransformError, match="returned a tuple, not \\(args, kwargs\\)"):
        check_transforms(Images(), (parse_transform(f"fn:{tmp_path}/canon.py:broken"),), Sample(0, (images,), {}))
    with pytest.raises(TransformError, match="file not found"):
        check_transforms(Images(), (parse_transform(f"fn:{tmp_path}/gone.py:nchw"),), Sample(0, (images,), {}))


# --- comparing outputs -------------------------------------------------------------------------------


def test_padded_outputs_are_cut_back_where_they_differ_by_a_padding():
    logits = torch.randn(2, 5, 10)
    keys = torch.randn(2, 4, 5, 16)
    padded = [Padded("input_ids", 1, 5, 64, "right")]
    transformed = {"logits": torch.cat([logits, torch.randn(2, 59, 10)], 1),
                   "cache": (torch.cat([keys, torch.randn(2, 4, 59, 16)], 2),)}
    found = compare_outputs({"logits": logits, "cache": (keys,)}, transformed, padded)
    assert found["equal"] and found["max_diff"] == 0.0
    assert found["cut"] == ["output['logits']", "output['cache'][0]"]
    left = compare_outputs(logits, torch.cat([torch.randn(2, 59, 10), logits], 1),
                           [Padded("input_ids", 1, 5, 64, "left")])
    assert left["equal"]


def test_outputs_that_differ_are_not_equal_with_the_largest_difference():
    found = compare_outputs((torch.zeros(3), torch.ones(2)), (torch.zeros(3), torch.tensor([1.0, 1.5])), [])
    assert not found["equal"] and found["max_diff"] == 0.5
    assert compare_outputs(torch.ones(3), torch.ones(3) + 1e-7, [])["equal"]  # float32 tolerance
    half = torch.ones(3, dtype=torch.float16)
    assert compare_outputs(half, half + 0.0005, [])["equal"] and not compare_outputs(half, half + 0.01, [])["equal"]
    assert not compare_outputs(torch.ones(3), torch.ones(3, dtype=torch.float64), [])["equal"]  # a new dtype
    shaped = compare_outputs(torch.ones(2, 3), torch.ones(2, 4), [])
    assert not shaped["equal"] and shaped["max_diff"] is None and "shape (2, 4) transformed" in shaped["note"]
    assert not compare_outputs((torch.ones(1),), (torch.ones(1), torch.ones(1)), [])["equal"]


def test_rows_are_each_transform_alone_then_the_chain():
    transforms = parse_transforms(["cast:x:float32", "contiguous:x", "pad:x:0:multiple=8"])
    assert [label for label, _ in rows_of(transforms)] == [
        "cast:x:float32", "contiguous:x", "pad:x:0:multiple=8",
        "cast:x:float32 + contiguous:x", "cast:x:float32 + contiguous:x + pad:x:0:multiple=8"]
    assert rows_of(transforms[:1]) == [("cast:x:float32", transforms[:1])]


# --- the command ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "message"), [
    ("cast:images:float33", "torch has no dtype 'float33'"),
    ("pad:input_ids:1:multiple=0", "the pad multiple 0 is below 1"),
])
def test_whatif_refuses_a_bad_spec_in_one_line_with_status_2(tmp_path, spec, message):
    result = CliRunner().invoke(cli.main, ["whatif", str(tmp_path / "out"), "--transform", spec])
    (line,) = result.output.strip().splitlines()
    assert result.exit_code == 2 and line.startswith(f"error: --transform {spec}: ") and message in line


def test_whatif_without_a_transform_needs_an_analysis_to_advise_from(tmp_path):
    result = CliRunner().invoke(cli.main, ["whatif", str(tmp_path)])
    (line,) = result.output.strip().splitlines()
    assert result.exit_code == 2 and line.startswith("error: ") and "catalog.json not found" in line
