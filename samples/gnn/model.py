"""The toy message-passing GNN of the seed article, whose inputs change shape every request.

One node type, two relation types ("local" and "cross" edges). Every layer sends a message
along each edge (one transform shared by both relations, scaled per edge), sums the messages
at their destination nodes with ``index_add``, and updates each node state. Node states and
projected context rows are then pooled into one vector and mapped to four outputs.

Either relation, the context, or even the node set may be empty in a request; these empty
inputs are what make ``torch.compile`` recompile (see ``samples/gnn/generate.py``).

This file imports nothing but torch, so a model spec can name it by path::

    samples/gnn/model.py:small      # 32 hidden, 2 layers: fast enough for tests on a CPU
    samples/gnn/model.py:full       # the article's 768 hidden, 16 layers
"""

from __future__ import annotations

import torch
from torch import nn

FEATURE_DIM = 16
OUTPUT_DIM = 4
WEIGHT_SEED = 0


class MessagePassingModel(nn.Module):
    """Message passing over local and cross edges, pooled with context rows to four outputs.

    Shapes (N nodes, L local edges, C cross edges, R context rows, any of them may be 0)::

        x                 [N, 16]    node features
        local_edge_index  [2, L]     row 0: source node, row 1: destination node
        cross_edge_index  [2, C]
        local_edge_scale  [L, 1]     one weight per edge
        cross_edge_scale  [C, 1]
        context           [R, 16]    graph-level context rows
        returns           [4]
    """

    def __init__(self, hidden: int = 768, layers: int = 16) -> None:
        super().__init__()
        self.input_projection = nn.Linear(FEATURE_DIM, hidden)
        # Per layer: one message transform shared by both relations, one node update.
        self.message_projections = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
        self.update_projections = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
        self.context_projection = nn.Linear(FEATURE_DIM, hidden)
        self.output_projection = nn.Linear(hidden, OUTPUT_DIM)

    def forward(
        self,
        x: torch.Tensor,
        local_edge_index: torch.Tensor,
        cross_edge_index: torch.Tensor,
        local_edge_scale: torch.Tensor,
        cross_edge_scale: torch.Tensor,
        context: torch.Tensor,
    ) -> torch.Tensor:
        state = self.input_projection(x).relu()
        relations = (
            (local_edge_index, local_edge_scale),
            (cross_edge_index, cross_edge_scale),
        )
        for message_projection, update_projection in zip(
            self.message_projections, self.update_projections, strict=True
        ):
            update = update_projection(state)
            for edge_index, edge_scale in relations:
                sources, destinations = edge_index[0], edge_index[1]
                messages = message_projection(state[sources]) * edge_scale
                update = update + torch.zeros_like(state).index_add(0, destinations, messages)
            state = update.relu()
        pooled = state.sum(0) + self.context_projection(context).sum(0)
        return self.output_projection(pooled)


def _seeded(hidden: int, layers: int) -> MessagePassingModel:
    # Same weights on every call, without disturbing the caller's global RNG.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(WEIGHT_SEED)
        return MessagePassingModel(hidden=hidden, layers=layers).eval()


def full() -> MessagePassingModel:
    """The article's model: 768 hidden values, 16 message-passing layers (≈19M parameters)."""
    return _seeded(hidden=768, layers=16)


def small() -> MessagePassingModel:
    """The same architecture at 32 hidden values and 2 layers: identical guards, fast on a CPU."""
    return _seeded(hidden=32, layers=2)
