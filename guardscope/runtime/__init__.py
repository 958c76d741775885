"""Use: serving a compiled model with a plan applied, recompiles falling back to eager, fallback
inputs recorded into a corpus (:func:`serve`)."""

from .serving import (FallbackRecorder, RuntimeStats, ServedModel, TrafficRecorder, choose_plan, input_signature,
                      serve, storage_bytes)

__all__ = ["FallbackRecorder", "RuntimeStats", "ServedModel", "TrafficRecorder", "choose_plan", "input_signature",
           "serve", "storage_bytes"]
