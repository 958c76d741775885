"""``torch_compat.backpropagate``, what a warmup with ``backward=True`` runs on each sample's outputs:
the backward of every tensor the outputs hold runs, and no parameter's ``.grad`` changes."""

from __future__ import annotations

import torch

from guardscope.torch_compat import backpropagate


def test_the_backward_runs_through_nested_outputs_and_no_grad_is_accumulated():
    linear = torch.nn.Linear(3, 2)
    ran = []
    linear.weight.register_hook(lambda grad: ran.append(grad.shape))
    out = linear(torch.randn(4, 3))
    assert backpropagate({"logits": out, "extra": (out.sum(), None, "text")}) is True
    assert ran == [torch.Size([2, 3])]  # the weight's gradient was computed, once for both outputs
    assert linear.weight.grad is None and linear.bias.grad is None


def test_outputs_that_need_no_gradient_run_nothing():
    linear = torch.nn.Linear(3, 2)
    with torch.no_grad():
        out = linear(torch.randn(4, 3))
    assert backpropagate((out, 1)) is False
    assert backpropagate(torch.randn(2, requires_grad=True)) is False  # a leaf: no backward graph
