"""Use: serving a compiled model with a plan applied, recompiles falling back to eager, fallback
inputs recorded into a corpus (:func:`serve`). Modules: ``serving`` (:func:`serve`: the plan chosen
and applied), ``served_model`` (the served model: how each call is served, and its counters),
``recording`` (the fallback and traffic recorders), ``background`` (compiling fallback topologies
off the serving thread)."""

from .background import BackgroundCompiler
from .recording import FallbackRecorder, input_signature, storage_bytes
from .traffic import TrafficRecorder
from .served_model import RuntimeStats, ServedModel
from .serving import choose_plan, serve

__all__ = ["BackgroundCompiler", "FallbackRecorder", "RuntimeStats", "ServedModel", "TrafficRecorder", "choose_plan",
           "input_signature", "serve", "storage_bytes"]
