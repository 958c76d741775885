"""How to compile and replay (importing this module imports no torch): :class:`ReplayOptions`, the backends, ``ARG:DIM`` marks, and the
options read back from a corpus manifest or an analysis's catalog.

The production options (``dynamic``, ``fullgraph``, ``mode``) come from the corpus manifest;
an analysis adds where and how it replayed (backend, device, grad mode, duck sizing, marks,
recompile limit) and records them all in ``catalog.json``'s ``compile``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .errors import CompileOptionsError
from .model import GRAD_MODES, INFERENCE_MODE, NO_GRAD

BACKENDS = ("eager", "aot_eager", "inductor")
DEFAULT_RECOMPILE_LIMIT = 4096

# Production torch.compile options a corpus manifest carries; an analysis adds where it ran.
PRODUCTION_FIELDS = ("dynamic", "fullgraph", "mode")
ANALYSED_FIELDS = PRODUCTION_FIELDS + ("backend", "device", "grad_mode", "dynamo_config")
# Manifest compile options that are not replayed as they are: the backend (an analysis picks its
# own), torch 2.13's per-call recompile limit (modelled, catalog.limits), and two recorded for the
# record (catalog.json's production section): inductor's options= beyond its mode's, which change
# code generation, not guards; torch 2.13's isolate_recompiles, which gives this torch.compile call
# its own recompile count (guardscope models one compiled callable: the same limits).
MODELLED_FIELDS = ("backend", "recompile_limit", "inductor_options", "isolate_recompiles")
# Accepted in a manifest's compile for the grad mode it names (true: inference_mode, false: no_grad).
GRAD_MODE_ALIAS = "inference_mode"


REPLAY_MODES = ("auto", "guards", "full")


def check_replay_request(options: "ReplayOptions", replay_mode: str, shapes_per_graph: int) -> list[str]:
    """Refuse a replay mode or padding budget that cannot work with ``options``; the warnings for
    what will be ignored."""
    if replay_mode not in REPLAY_MODES:
        raise CompileOptionsError(f"replay mode {replay_mode!r} is not auto, guards or full")
    if replay_mode == "guards" and not options.fullgraph:
        raise CompileOptionsError(
            "--replay guards needs fullgraph=True: with graph breaks later frames see runtime "
            "values, so a sample cannot be skipped on the first frame's guards; use --replay full or auto"
        )
    if shapes_per_graph < 1:
        raise CompileOptionsError(f"--shapes-per-graph {shapes_per_graph} must be at least 1")
    if options.uses_cudagraphs and replay_mode == "guards":
        return ["--replay guards ignored: CUDA graphs record at run time, so every sample runs"]
    return []


def parse_mark(text: str) -> tuple[str, int]:
    """``"ARG:DIM"`` (the form of ``--mark-unbacked`` and of ``catalog.json``'s
    ``compile.mark_unbacked``) as ``(argument path, dim)``; ValueError when it is not."""
    path, _, dim = str(text).rpartition(":")
    if not path or not dim.lstrip("-").isdigit():
        raise ValueError(f"{text!r} is not ARG:DIM (e.g. x:0)")
    return path, int(dim)


@dataclass(frozen=True)
class ReplayOptions:
    """How to compile and replay. ``dynamic``/``fullgraph``/``mode`` are production options."""

    backend: str = "eager"
    dynamic: bool | None = None
    fullgraph: bool = False
    mode: str | None = None
    device: str = "cpu"
    # Autograd's mode around each call (model.GRAD_MODES): production's, recorded by the traffic
    # recorders, else --grad-mode; inference_mode when neither says.
    grad_mode: str = INFERENCE_MODE
    duck_shape: bool = True
    # (argument path, dim) pairs marked with mark_unbacked; "first" marks only sample 0 (the
    # article's Option 3), "all" marks every sample (what a serving wrapper would do).
    mark_unbacked: tuple[tuple[str, int], ...] = ()
    mark_samples: str = "all"
    # (argument path, dim, rank) made unbacked through torch 2.13's torch.compile(shapes_spec=...)
    # (torch_compat.shapes_spec_of), compiled without dynamic=: every dim it does not name is static.
    shapes_spec: tuple[tuple[str, int, int], ...] = ()
    recompile_limit: int = DEFAULT_RECOMPILE_LIMIT
    # Production's Dynamo settings that differ from torch's defaults (a corpus manifest's
    # dynamo_config), as sorted (name, value) pairs: the replay runs under those that change
    # guards; the limits among them are modelled (catalog.limits), never applied.
    dynamo_config: tuple[tuple[str, Any], ...] = ()

    def validate(self) -> None:
        import torch

        if self.backend not in BACKENDS:
            raise CompileOptionsError(
                f"backend {self.backend!r} is not one of {', '.join(BACKENDS)}"
            )
        if self.grad_mode not in GRAD_MODES:
            raise CompileOptionsError(f"grad mode {self.grad_mode!r} is not one of {', '.join(GRAD_MODES)}")
        if self.mark_samples not in ("first", "all"):
            raise CompileOptionsError("mark_samples must be 'first' or 'all'")
        try:
            torch.device(self.device)
        except (RuntimeError, TypeError):
            raise CompileOptionsError(
                f"device {self.device!r} is not a torch device: use cpu, cuda or cuda:N"
            ) from None
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise CompileOptionsError(
                f"device {self.device!r} was asked for but torch.cuda.is_available() is False; "
                "use --device cpu"
            )

    @property
    def inference_mode(self) -> bool:
        """Whether calls run under ``torch.inference_mode()``."""
        return self.grad_mode == INFERENCE_MODE

    @property
    def uses_cudagraphs(self) -> bool:
        """CUDA graphs are recorded at run time: inductor with a CUDA-graph mode on a GPU."""
        from . import torch_compat

        return (
            self.backend == "inductor"
            and self.device.startswith("cuda")
            and torch_compat.mode_uses_cudagraphs(self.mode)
        )

    def compile_json(self) -> dict[str, Any]:
        # "mode" selects inductor settings and is passed only with backend="inductor"; guards do
        # not depend on it, so an eager analysis of a mode="max-autotune" model is still faithful.
        return {
            "backend": self.backend,
            "dynamic": self.dynamic,
            "fullgraph": self.fullgraph,
            "mode": self.mode,
            "device": self.device,
            "grad_mode": self.grad_mode,
            "inference_mode": self.inference_mode,
            "duck_shape": self.duck_shape,
            "mark_unbacked": [f"{path}:{dim}" for path, dim in self.mark_unbacked],
            "mark_samples": self.mark_samples if self.mark_unbacked else None,
            "recompile_limit": self.recompile_limit,
            **({"dynamo_config": dict(self.dynamo_config)} if self.dynamo_config else {}),
            **({"shapes_spec": [f"{path}:{dim}" for path, dim, _ in self.shapes_spec]} if self.shapes_spec else {}),
        }


def _replay_options(compile_options: dict[str, Any], fields: tuple[str, ...], **overrides: Any) -> ReplayOptions:
    """:class:`ReplayOptions` from the given fields of a compile-options dict (nulls mean the
    default), then the caller's overrides (not None)."""
    if compile_options.get("dynamic") not in (None, True, False):
        raise CompileOptionsError(
            f"compile.dynamic is {compile_options['dynamic']!r}; use true, false or null"
        )
    taken = {name: compile_options[name] for name in fields if compile_options.get(name) is not None}
    if "grad_mode" in fields and "grad_mode" not in taken and compile_options.get(GRAD_MODE_ALIAS) is not None:
        # A catalog written before grad modes, or a manifest's compile={"inference_mode": false}.
        taken["grad_mode"] = INFERENCE_MODE if compile_options[GRAD_MODE_ALIAS] else NO_GRAD
    if "dynamo_config" in taken:
        taken["dynamo_config"] = dynamo_pairs(taken["dynamo_config"])
    return replace(ReplayOptions(**taken), **{k: v for k, v in overrides.items() if v is not None})


def dynamo_pairs(settings: dict[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    """Recorded Dynamo settings as :attr:`ReplayOptions.dynamo_config` holds them."""
    return tuple(sorted((settings or {}).items()))


def options_from_manifest(compile_options: dict[str, Any], **overrides: Any) -> ReplayOptions:
    """Production compile options from the manifest, then the caller's overrides (not None)."""
    unknown = sorted(set(compile_options) - set(PRODUCTION_FIELDS) - set(MODELLED_FIELDS) - {GRAD_MODE_ALIAS})
    if unknown:
        from . import torch_compat

        torch_compat.warn_once(f"ignoring unknown compile options in the manifest: {unknown}")
    return _replay_options(compile_options, PRODUCTION_FIELDS + ("grad_mode",), **overrides)


def production_options(catalog: dict[str, Any], **overrides: Any) -> ReplayOptions:
    """The analysed compile options without the analysis-only marks and settings."""
    return _replay_options(catalog["compile"], ANALYSED_FIELDS, **overrides)


def production_backend(catalog: dict[str, Any]) -> tuple[str, str]:
    """The backend production compiles with and where that comes from (``catalog.json``'s
    ``production``: recorded, else inductor, torch.compile's default): what the proofs compile with."""
    section = catalog.get("production") or {}
    return section.get("backend", "inductor"), section.get("backend_source", "torch.compile's default")


def production_graph_limit(catalog: dict[str, Any]) -> int:
    """The graphs one function can hold in production (``catalog.json``'s ``production``: the lower
    of its two recompile limits; torch's defaults, 8 and 256, for a catalog without one)."""
    section = catalog.get("production") or {}
    return min(section.get("recompile_limit", 8), section.get("accumulated_recompile_limit", 256))


def analysis_options(catalog: dict[str, Any]) -> ReplayOptions:
    """Exactly the options the analysis replayed with (duck sizing, marks and limit included),
    so a replay of its compile samples rebuilds its graphs."""
    compile_options = catalog["compile"]
    marks = tuple(parse_mark(text) for text in compile_options.get("mark_unbacked") or ())
    overrides: dict[str, Any] = {"mark_unbacked": marks}
    for name in ("duck_shape", "recompile_limit", "mark_samples"):
        if compile_options.get(name) is not None:
            overrides[name] = compile_options[name]
    return _replay_options(compile_options, ANALYSED_FIELDS, **overrides)


def compile_arguments(compile_options: dict[str, Any]) -> str:
    """The production options as the keyword arguments of a ``torch.compile(model...)`` call:
    ``", dynamic=True, fullgraph=True"`` (``fullgraph=False``, the default, is left out)."""
    call = []
    for key in PRODUCTION_FIELDS:
        value = compile_options.get(key)
        if value is not None and not (key == "fullgraph" and value is False):
            call.append(f", {key}={value!r}")
    return "".join(call)


def production_fields(compile_options: dict[str, Any]) -> dict[str, Any]:
    """The production ``torch.compile`` options of a ``compile`` dict that are set (the form a
    corpus manifest and a generated module's ``torch.compile`` call take)."""
    return {key: compile_options[key] for key in PRODUCTION_FIELDS if compile_options.get(key) is not None}
