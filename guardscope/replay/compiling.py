"""How a replay is set up: the torch settings it runs under and the compile itself — the only
module that calls ``torch.compile``.

:func:`replay_settings` holds Dynamo's settings for the length of a replay (the recompile limit
raised to the options', duck shaping off unless asked for, production's recorded settings that
change guards) and restores them on exit;
:func:`compile_model` compiles a model with the options' backend, ``dynamic``, ``fullgraph`` and
(inductor only) mode, or instead of ``dynamic`` a ``ShapesSpec`` (under the keyword this torch takes:
``shapes_spec=`` in 2.13, ``dynamic_shapes=`` in 2.14): the replay's :class:`~guardscope.replay.runner.Runner` and the served model
compile through it.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from .. import torch_compat
from ..options import ReplayOptions


@contextlib.contextmanager
def replay_settings(options: ReplayOptions) -> Iterator[None]:
    settings = {} if options.duck_shape else {torch_compat.DUCK_SHAPE_SETTING: False}
    with torch_compat.raised_recompile_limit(options.recompile_limit), torch_compat.patched_config(
        settings
    ), torch_compat.applied_settings(dict(options.dynamo_config)):
        yield


def compile_model(model: Any, options: ReplayOptions) -> Any:
    kwargs: dict[str, Any] = {
        "backend": options.backend,
        "dynamic": options.dynamic,
        "fullgraph": options.fullgraph,
    }
    if options.mode is not None and options.backend == "inductor":
        kwargs["mode"] = options.mode
    if options.shapes_spec:  # torch takes no dynamic= with it: the spec says what is dynamic
        del kwargs["dynamic"]  # under the keyword this torch takes: shapes_spec= (2.13), dynamic_shapes= (2.14)
        kwargs.update(torch_compat.spec_compile_kwargs(options.shapes_spec))
    return torch.compile(model, **kwargs)
