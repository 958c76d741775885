"""torch.export Dims that torch accepts, checked against the corpus — or, when the model cannot be
exported, why in plain words and what to do about it.

:func:`plan_export` starts from the corpus's spec (:func:`guardscope.fixes.plan.choose_export_dims`) and
lets torch refine it: it exports the example sample through the very ``export_dims.py`` it would
write, and on a constraint violation applies torch's suggested fixes (read into guardscope's own
spec by :func:`guardscope.fixes.plan.parse_suggested_fixes`, so the module stays plain Python) and
exports again, at most :data:`MAX_ROUNDS` times. Each topology's representative, then every other
call signature among its members (:func:`refused_members`), is checked against the exported
program's input constraints and guards without a forward
(:func:`guardscope.torch_compat.export_input_checker`); the topologies it refuses, whole or in
part, are listed with the reason. Any other error of torch.export makes the plan infeasible: a
one-line reason with a remedy, and torch's whole message.
"""

from __future__ import annotations

import os
import re
import sysconfig
import traceback
import types
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from .. import torch_compat
from ..corpus.reader import SignatureRecord
from ..corpus.signatures.signature import signature
from ..model import Sample
from ..replay.arguments import CallBinder, tensors_of
from ..text import first_line
from ..torch_compat import dtype_name
from .emit.export_dims import render_export_dims
from .plan import (
    ExportPlan,
    OutsideTopology,
    apply_suggested_fixes,
    call_difference,
    choose_example,
    choose_export_dims,
    parse_suggested_fixes,
)

MAX_ROUNDS = 6  # exports tried; each round applies all of torch's suggested fixes at once
ERROR_LIMIT = 2000  # characters of torch's explanation kept where one error is reported

# torch's messages (torch 2.9 - 2.14): an output or input type pytree cannot flatten
# (torch.utils._pytree), data-dependent guards (GuardOnDataDependentSymNode), and the frames torch
# names when it has no Python traceback of the user's code (strict mode).
UNKNOWN_TYPE = re.compile(r"Found <class '([\w.]+)'> in (input|output), which is not a known type")
# torch.export's refusal of an argument it cannot flatten (a KV cache generate() passes).
UNSUPPORTED_INPUT = re.compile(r"Unsupported input type <class '([\w.]+)'>")
DATA_DEPENDENT = re.compile(r"data-dependent|data dependent|DataDependent")
CONSTRAINTS_VIOLATED = "Constraints violated"
CALL_RAISED = re.compile(r'The following call raised this error:\s*\n\s*File "([^"]+)", line (\d+), in (\w+)\n[ \t]*(.*)')
CAUSED_BY = re.compile(r"Caused by: \(([^()]+)\)")
# Lines of torch's messages that say where to read more, not what went wrong.
BOILERPLATE = (
    "For more information, run with",
    "For extended logs",
    "If you suspect the guard",
    "For more debugging help",
    "For C++ stack trace",
    "For more information about this error, see",
    "The error above occurred when calling torch.export",
)
RENDERED = "<export_dims.py>"  # the file name the rendered module runs under here


def plan_export(model: Any, catalog: dict[str, Any], sample_at: Callable[[int], Sample],
                margin: float = 0.0, records: Iterable[Any] | None = None) -> ExportPlan:
    """The export spec for the analysis: refined by torch on the chosen example, each topology
    checked against the program (its representative, then every other call signature among its
    members: :func:`refused_members`), or infeasible with the reason. ``records``: the corpus
    streamed once for that check (:meth:`Corpus.iter_records`, then any probed samples); None
    loads each member through ``sample_at``."""
    plan = choose_export_dims(catalog, margin)
    topologies = catalog["topologies"]
    if not topologies:
        return replace(plan, status="infeasible", reason="the corpus has no samples to export with")
    module = torch_compat.forward_owner(model)
    if module is None:
        return replace(plan, status="infeasible",
                       reason=f"torch.export exports a module's forward, and the model spec gives "
                              f"{getattr(model, '__qualname__', type(model).__qualname__)}: have it return the module")
    model = module.eval()
    samples = {t["id"]: sample_at(t["first_sample"]) for t in topologies}
    bound = {topology: bind(model, sample) for topology, sample in samples.items()}
    calls = {topology: describe_call(arguments) for topology, arguments in bound.items()}
    structures = {
        topology: (len(samples[topology].args), tuple(sorted(samples[topology].kwargs)),
                   tuple(call.items()) if call is not None else None)
        for topology, call in calls.items()
    }
    unsuited = {topology for topology, arguments in bound.items() if small_dynamic_size(plan, arguments)}
    example = choose_example(topologies, structures, unsuited)
    plan = replace(plan, example_sample=example["first_sample"], example_topology=example["id"])
    # Export where the recorded tensors are (the model may have been moved to the analysis's
    # device by the planning before this).
    recorded = [tensor for _, tensor in tensors_of(bound[example["id"]] or {})]
    if recorded:
        model = model.to(recorded[0].device)
    plan, program = refine(model, samples[example["id"]], plan, catalog)
    if program is None:
        return plan
    accepts = torch_compat.export_input_checker(program)
    reasons: dict[int, str] = {}
    for topology in topologies:
        sample, call = samples[topology["id"]], calls[topology["id"]]
        if call is None:
            reason = "its arguments do not bind to forward's signature"
        else:
            reason = call_difference(calls[example["id"]], call) or accepts(sample.args, sample.kwargs)
        if reason is not None:
            reasons[topology["id"]] = reason
    claimed = [topology for topology in topologies if topology["id"] not in reasons]
    reasons.update(refused_members(model, claimed, accepts, sample_at, records))
    outside = tuple(OutsideTopology(t["id"], t["first_sample"], t["count"], reasons[t["id"]])
                    for t in topologies if t["id"] in reasons)
    plan = replace(plan, outside=outside)
    if len(outside) == len(topologies):  # a program that serves nothing is no fix
        return replace(plan, status="infeasible", reason=serves_nothing(example, reasons[example["id"]],
                                                                       sum(t["count"] for t in topologies)))
    return plan


_SPECIALISED_INPUT = re.compile(r"Expected input at (\S+) to be equal to")


def serves_nothing(example: dict[str, Any], reason: str, samples: int) -> str:
    """Why an export plan whose program takes none of the corpus's samples is not possible: the
    program's own example topology refused too, with what to do where torch said why."""
    text = (f"the program exported from sample {example['first_sample']} takes none of the {samples} samples, "
            f"not even all of its own topology T{example['id']}: {reason}")
    found = _SPECIALISED_INPUT.search(reason)
    if found:
        name = re.findall(r"\w+", found.group(1))[-1]
        text += (f" (torch.export fixes a Python number to the example's value: pass {name} as a "
                 "0-d tensor to make it an input, or export one program per value)")
    return text


def refused_members(model: Any, topologies: list[dict[str, Any]], accepts: Callable[[tuple, dict], str | None],
                    sample_at: Callable[[int], Sample], records: Iterable[Any] | None = None) -> dict[int, str]:
    """Why the exported program refuses a member of each topology other than its representative,
    by topology id (those it takes whole are absent). Each call signature among the members
    (sizes, strides, dtypes, Python values) is checked once, on its first sample: a guard torch
    keeps beside the Dims' ranges (``1 + (images.size()[3] - 1) // 32 != 1``) refuses sizes the
    ranges take, so one example per topology does not show that the program takes the rest.
    ``records``: the corpus streamed (samples and signature records); None loads each member
    through ``sample_at``."""
    topology_of = {index: t["id"] for t in topologies for index in t.get("samples") or ()
                   if index != t["first_sample"]}
    verdicts: dict[tuple, str | None] = {}  # call signature -> why the program refuses it
    refused: dict[int, str] = {}

    def check(indices: list[int], record: Sample | SignatureRecord) -> None:
        """Check the call ``record`` stands for at ``indices`` (members of claimed topologies)."""
        first: dict[int, int] = {}
        for index in indices:
            if topology_of[index] not in refused:
                first.setdefault(topology_of[index], index)
        if not first:
            return
        recorded = isinstance(record, SignatureRecord)
        key = record.signature if recorded else call_signature(record)
        if key not in verdicts:
            sample = record.sample(min(first.values()) - record.first) if recorded else record
            reason = accepts(sample.args, sample.kwargs)
            verdicts[key] = None if reason is None else f"({describe_shapes(model, sample)}): {reason}"
        if (reason := verdicts[key]) is not None:
            for topology, index in first.items():
                refused[topology] = f"its sample {index} {reason}"

    if not topology_of:
        return {}
    for record in records if records is not None else map(sample_at, sorted(topology_of)):
        if isinstance(record, SignatureRecord):
            indices = [i for i in range(record.first, record.first + record.repeat) if i in topology_of]
            if indices:
                check(indices, record)
        elif record.index in topology_of:
            check([record.index], record)
    return refused


def call_signature(sample: Sample) -> tuple:
    """The sample's call signature: as recorded for a signature sample, else taken from its
    arguments."""
    return sample.signature if sample.signature is not None else signature(sample.args, sample.kwargs, inference=False)


def describe_shapes(model: Any, sample: Sample) -> str:
    """The sizes of a call's tensors, by argument: ``images [5, 3, 120, 120]``."""
    arguments = bind(model, sample) or {"args": sample.args, **sample.kwargs}
    return ", ".join(f"{path} {list(tensor.shape)}" for path, tensor in tensors_of(arguments)) or "no tensors"


def refine(model: Any, example: Sample, plan: ExportPlan, catalog: dict[str, Any]) -> tuple[ExportPlan, Any]:
    """Export ``example`` with the plan's module, applying torch's suggested fixes after each
    constraint violation: (the plan torch accepted, its ExportedProgram), or (an infeasible
    plan, None)."""
    for round_number in range(1, MAX_ROUNDS + 1):
        module = load_rendered(render_export_dims(catalog, plan))
        try:
            with torch_compat.no_leaked_export_hooks():
                return plan, module.export(model, *example.args, **example.kwargs)
        except Exception as exc:  # noqa: BLE001 - every torch.export failure is a finding
            failure = exc
        if not torch_compat.is_constraint_violation(failure):
            return infeasible(plan, failure), None
        if round_number == MAX_ROUNDS:
            break
        try:
            fixes = parse_suggested_fixes(str(failure))
            dims = apply_suggested_fixes(plan.dims, fixes, round_number)
        except ValueError as exc:
            return infeasible(plan, failure, f"torch.export rejects the Dims and suggests a fix guardscope cannot apply ({exc})"), None
        if dims == plan.dims:
            return infeasible(plan, failure, "torch.export rejects the Dims again after its own suggested fixes"), None
        plan = replace(plan, dims=dims, fixes=plan.fixes + tuple(f"round {round_number}: {fix.text}" for fix in fixes))
    return infeasible(plan, failure, f"torch.export still rejects the Dims after {MAX_ROUNDS} rounds of its own suggested fixes"), None


def infeasible(plan: ExportPlan, exc: BaseException, constraint: str | None = None) -> ExportPlan:
    """The plan marked infeasible: ``constraint`` (why torch's fixes did not converge) or the
    explanation of ``exc``, and torch's whole message."""
    reason = (f"{constraint}: apply torch's suggested fixes by hand (its message is in fixes.json)"
              if constraint else explain_failure(exc))
    return replace(plan, status="infeasible", reason=reason, torch_message=f"{type(exc).__name__}: {exc}", outside=())


def load_rendered(text: str) -> types.ModuleType:
    """The module ``text`` defines, run here as ``export_dims.py`` will run."""
    module = types.ModuleType("guardscope_export_dims")
    exec(compile(text, RENDERED, "exec"), module.__dict__)  # guardscope's own rendering (plan names are identifiers)
    return module


# --- the call's structure ------------------------------------------------------------------------


def bind(model: Any, sample: Sample) -> dict[str, Any] | None:
    """The sample's arguments by forward's parameter names, as torch.export binds them (through
    transformers' wrapper to forward's own parameters), or None when they do not bind."""
    return CallBinder(model).arguments(sample.args, sample.kwargs)


def describe_call(arguments: dict[str, Any] | None) -> dict[str, str] | None:
    return None if arguments is None else {name: describe_value(value) for name, value in arguments.items()}


def describe_value(value: Any) -> str:
    """What an exported program checks of an argument, in words: a tensor's rank, dtype and
    device, a container's structure, a Python value itself (torch.export specialises it)."""
    if isinstance(value, torch.Tensor):
        return f"a {value.dim()}-d {dtype_name(value.dtype)} tensor on {value.device.type}"
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        kind = type(value).__name__
        if not value:
            return f"an empty {kind}"
        return f"a {kind} of {len(value)} ({', '.join(describe_value(item) for item in value)})"
    if isinstance(value, dict):
        return "a dict {" + ", ".join(f"{key!r}: {describe_value(item)}" for key, item in value.items()) + "}"
    return f"a {type(value).__qualname__}"


def small_dynamic_size(plan: ExportPlan, arguments: dict[str, Any] | None) -> bool:
    """Whether the call has a size 0 or 1 where the plan declares a Dim (torch.export would
    specialise the Dim to it)."""
    if arguments is None:
        return True
    for dim in plan.dims:
        for argument, axis in dim.members:
            value = arguments.get(argument)
            if isinstance(value, torch.Tensor) and axis < value.dim() and value.shape[axis] <= 1:
                return True
    return False


# --- why torch.export failed ---------------------------------------------------------------------


def explain_failure(exc: BaseException) -> str:
    """One line in plain words: what stops torch.export, and what to do about it."""
    return explain(type(exc).__name__, str(exc), user_location(exc))


def explain(kind: str, message: str, location: str | None) -> str:
    """:func:`explain_failure` from the exception's class name, message and the user's code
    location (None when unknown). Pure."""
    if unknown := UNKNOWN_TYPE.search(message):
        qualname, side = unknown.groups()
        name = qualname.rsplit(".", 1)[-1]
        if qualname.startswith("transformers.") and name.endswith("Cache"):
            return (f"the model returns a transformers {name}, which torch.export cannot flatten: export with "
                    "use_cache=False (config.use_cache = False) or register the type with torch.utils._pytree")
        verb, plain = ("returns", "return") if side == "output" else ("takes", "pass")
        return (f"the model {verb} a {qualname}, which torch.export cannot flatten: register the type with "
                f"torch.utils._pytree.register_pytree_node, or {plain} plain tensors")
    if unsupported := UNSUPPORTED_INPUT.search(message):
        qualname = unsupported.group(1)
        name = qualname.rsplit(".", 1)[-1]
        if qualname.startswith("transformers.") and name.endswith("Cache"):
            return (f"the model takes a transformers {name} (generate()'s KV cache), which torch.export cannot "
                    "take as an input: export the decoder without one (use_cache=False), or with a static cache "
                    "the exported module owns (transformers.integrations.executorch."
                    "TorchExportableModuleWithStaticCache, or convert_and_export_with_cache)")
        return (f"the model takes a {qualname}, which torch.export cannot take as an input: register it with "
                "torch.export.register_dataclass or torch.utils._pytree.register_pytree_node, or pass plain tensors")
    if DATA_DEPENDENT.search(kind) or DATA_DEPENDENT.search(message):
        at = f" at {location}" if location else ""
        return (f"torch.export met data-dependent control flow{at}: a tensor's value decides a branch or a size, "
                "which one exported program cannot follow. Make the value static (a constant or an argument), "
                "state what holds with torch._check(...), or branch with torch.cond")
    first = first_line(message)[:400]
    if CONSTRAINTS_VIOLATED in message:
        return (f"torch.export rejects the Dims and suggests no fix ({first}): the model cannot take every size "
                "in the corpus's ranges; narrow them by hand, or let torch infer them with Dim.AUTO "
                "(its message is in fixes.json)")
    return (f"torch.export failed with {kind}: {first} (torch's whole message is in fixes.json; "
            "torch.export.draft_export lists every problem in one run)")


def user_location(exc: BaseException) -> str | None:
    """Where the model's own code was when torch.export failed: the innermost frame of the
    traceback outside torch, guardscope and the standard library (non-strict export runs the
    model's Python), else the call torch's message names."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if not _library_file(frame.filename):
            return format_location(frame.filename, frame.lineno, frame.name, frame.line)
    return location_from_message(str(exc))


def location_from_message(message: str) -> str | None:
    """The user call torch's message names (``The following call raised this error:`` or
    ``Caused by: (file:line in function)`` outside torch), or None. Pure."""
    if called := CALL_RAISED.search(message):
        path, line, function, code = called.groups()
        return format_location(path, int(line), function, code)
    caused = CAUSED_BY.search(message)
    if caused and not re.search(r"(^|/)(torch|_export|fx|_dynamo|_subclasses)/", caused.group(1)):
        return caused.group(1)
    return None


def format_location(path: str, line: int | None, function: str, code: str | None) -> str:
    where = f"{_short_path(path)}:{line} in {function}"
    return f"{where} (`{code.strip()}`)" if code and code.strip() else where


def _short_path(path: str) -> str:
    """A path without the machine's prefix: from the package folder for an installed package,
    relative to the working directory under it, else its last two parts."""
    parts = Path(path).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(marker):])
    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return "/".join(parts[-2:])


def _library_file(path: str) -> bool:
    if path.startswith("<"):
        return True
    roots = (os.path.dirname(torch.__file__), os.path.dirname(os.path.abspath(__file__)))
    if any(path.startswith(root + os.sep) for root in roots):
        return True
    stdlib = sysconfig.get_paths()["stdlib"]
    return path.startswith(stdlib + os.sep) and not any(m in path for m in ("site-packages", "dist-packages"))


def torch_error(exc: BaseException, limit: int = ERROR_LIMIT) -> str:
    """``Type: message`` with torch's explanation kept (several lines) and its pointers to more
    logs dropped, at most ``limit`` characters."""
    lines: list[str] = []
    for line in str(exc).strip().splitlines():
        if line.strip().startswith(BOILERPLATE) or (not line.strip() and (not lines or not lines[-1])):
            continue
        lines.append(line.rstrip() if line.strip() else "")
    text = f"{type(exc).__name__}: " + "\n".join(lines).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"
