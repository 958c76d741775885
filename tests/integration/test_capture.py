"""The structured-trace parser, on traces recorded by two torch versions (see each README).

This file holds the tests that compile in this process; the others are in
tests/unit/test_capture.py.
"""

from __future__ import annotations

import torch

from guardscope.catalog.classify import classify_reasons
from guardscope.replay.capture import TraceCapture
from guardscope.replay.events import events_from_records


def test_capture_attributes_compiles_to_samples():
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: x.sin() * 2, backend="eager", dynamic=True)
    with TraceCapture() as capture:
        for index, size in enumerate([4, 5, 1, 6]):
            capture.set_sample(index)
            compiled(torch.randn(size))
    events = events_from_records(capture.records).events
    assert [e.sample for e in events] == [0, 2]
    assert classify_reasons(events[1].reasons)[0].kind.value == "zero_one_specialization"
    torch._dynamo.reset()


