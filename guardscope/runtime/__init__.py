"""Use: serving a compiled model with a plan applied, recompiles falling back to eager, fallback
inputs recorded into a corpus (:func:`serve`). Modules: ``serving`` (the served model and
:func:`serve`), ``recording`` (the fallback and traffic recorders), ``background`` (compiling
fallback topologies off the serving thread)."""

from .background import BackgroundCompiler
from .serving import (FallbackRecorder, RuntimeStats, ServedModel, TrafficRecorder, choose_plan, input_signature,
                      serve, storage_bytes)

__all__ = ["BackgroundCompiler", "FallbackRecorder", "RuntimeStats", "ServedModel", "TrafficRecorder", "choose_plan",
           "input_signature", "serve", "storage_bytes"]
