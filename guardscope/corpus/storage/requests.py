"""Which request and step each recorded call belongs to: ``requests.json`` beside the manifest.

A server's request often makes several forward calls: ``generate()`` makes a prefill and one
decode step per new token. A recorder that knows the request tags each call with it (and counts
its steps), so an analysis can say "compiled at request 17, step 4" and count requests, not calls.
The file is optional (a corpus without it has untagged calls) and holds runs, not one entry per
call: consecutive calls of one request are one run::

    {"format": "guardscope-requests", "runs": [["req-1", 0, 0, 6], ["req-2", 6, 0, 9], ...]}

Each run is ``[request, first sample, step of that sample, calls]``: samples ``first`` ..
``first + calls - 1`` are steps ``step`` .. ``step + calls - 1`` of ``request`` (a string or an
int). Calls of interleaved requests (a server on several threads) make several runs of one request.
The file is data only; a malformed one is refused with the field named.
"""

from __future__ import annotations

import bisect
import json
import pathlib
from typing import Any

from ...errors import ManifestError

REQUESTS_NAME = "requests.json"
REQUESTS_FORMAT = "guardscope-requests"


def check_request(request: object) -> str | int:
    """A request tag as the file stores it: a string or an int (not a bool)."""
    if isinstance(request, bool) or not isinstance(request, (str, int)):
        raise TypeError(f"a request tag is a str or an int, got {type(request).__name__}")
    return request


class RequestRuns:
    """The runs of tagged calls, built as calls are recorded and read back by sample index."""

    def __init__(self, runs: list[list[Any]] | None = None) -> None:
        self.runs: list[list[Any]] = runs or []  # [request, first, step, calls]
        self._firsts: list[int] = []  # each run's first sample, for of()

    def add(self, index: int, request: str | int, step: int) -> None:
        """Tag sample ``index`` (recorded after every sample tagged before it)."""
        last = self.runs[-1] if self.runs else None
        if last is not None and last[0] == request and last[1] + last[3] == index and last[2] + last[3] == step:
            last[3] += 1
        else:
            self.runs.append([request, index, step, 1])

    def upto(self, samples: int) -> list[list[Any]]:
        """The runs of samples ``0 .. samples - 1`` (those on disk)."""
        kept = []
        for request, first, step, calls in self.runs:
            if first >= samples:
                break
            kept.append([request, first, step, min(calls, samples - first)])
        return kept

    def of(self, index: int) -> tuple[str | int, int] | None:
        """``(request, step)`` of sample ``index``, or None when it was not tagged."""
        if len(self._firsts) != len(self.runs):  # runs were added since
            self._firsts = [run[1] for run in self.runs]
        position = bisect.bisect_right(self._firsts, index) - 1
        if position < 0:
            return None
        request, first, step, calls = self.runs[position]
        return (request, step + index - first) if index < first + calls else None

    def requests(self) -> int:
        """How many distinct requests are tagged."""
        return len({run[0] for run in self.runs})

    def to_json(self, samples: int) -> dict[str, Any]:
        return {"format": REQUESTS_FORMAT, "runs": self.upto(samples)}


def read_requests(directory: pathlib.Path, samples: int) -> RequestRuns | None:
    """The corpus's ``requests.json``, checked; None when there is none."""
    path = directory / REQUESTS_NAME
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"{path} is not valid JSON ({exc}); delete it or re-record the corpus") from None
    if not isinstance(raw, dict) or raw.get("format") != REQUESTS_FORMAT or not isinstance(raw.get("runs"), list):
        raise ManifestError(f"{path} is not a {REQUESTS_FORMAT} file; delete it or re-record the corpus")
    after = 0
    for position, run in enumerate(raw["runs"]):
        ok = isinstance(run, list) and len(run) == 4
        if ok:
            request, first, step, calls = run
            ok = (not isinstance(request, bool) and isinstance(request, (str, int))
                  and all(type(v) is int for v in (first, step, calls)) and first >= after and step >= 0
                  and calls >= 1)
        if not ok:
            raise ManifestError(f"{path}: field 'runs[{position}]' is not [request, first, step, calls], "
                                "in sample order")
        after = run[1] + run[3]
    # Runs past the manifest's samples (a recording stopped between the two writes) are cut off.
    return RequestRuns(RequestRuns(raw["runs"]).upto(samples))
