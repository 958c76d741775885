"""A signature record: consecutive samples recorded as their signature only, as a corpus reader
gives them (:mod:`guardscope.corpus.reader`, :mod:`guardscope.corpus.traffic_log.records`)."""

from __future__ import annotations

import json
from typing import Any

import torch

from ...model import Sample
from .call_template import CallTemplate
from .materialising import materialise
from .signature import signature_from_json, signature_to_json


class SignatureRecord:
    """A format 3 signature record as read: ``repeat`` consecutive samples from ``first``,
    recorded as their signature only (``array``, its JSON form), ``full`` the index of the
    sample of that signature recorded in full (or None).

    ``call`` and ``key`` (:class:`~guardscope.corpus.signatures.call_template.CallTemplate`) when the signature is
    a call template's, else None; :meth:`arguments` then gives shared read-only arguments, built
    once per argument and size. :meth:`sample` builds one sample afresh, as loading does.
    """

    __slots__ = ("first", "repeat", "_array", "full", "call", "key", "_signature", "_placement")

    def __init__(self, first: int, repeat: int, array: list | str, full: int | None, call: CallTemplate | None,
                 key: tuple | None, sig: tuple | None, placement: Any) -> None:
        """``array``: the signature's JSON array, or its JSON text (parsed when asked for)."""
        self.first, self.repeat, self._array, self.full = first, repeat, array, full
        self.call, self.key, self._signature, self._placement = call, key, sig, placement

    @property
    def array(self) -> list:
        if self._array is None:  # a traffic log's record of a call template: its columns made its key
            self._array = signature_to_json(self.signature)
        if type(self._array) is str:
            self._array = json.loads(self._array)
        return self._array  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"SignatureRecord(first={self.first}, repeat={self.repeat}, full={self.full})"

    @property
    def signature(self) -> tuple:
        if self._signature is None:
            if self._array is None:
                self._signature = self.call.signature_of(self.key)  # type: ignore[union-attr]
            else:
                self._signature = signature_from_json(self.array)
        return self._signature

    def arguments(self) -> tuple[tuple, dict[str, Any], list[torch.Tensor]]:
        """``(args, kwargs, tensors)`` of a call template's record, shared: read only."""
        if self.call is None or self.key is None:
            raise ValueError("only a call template's record has shared arguments")
        return self.call.arguments(self.key)

    def sample(self, offset: int) -> Sample:
        """Sample ``first + offset``, its arguments materialised afresh."""
        if not 0 <= offset < self.repeat:
            raise IndexError(f"a record of {self.repeat} samples has no sample {offset}")
        args, kwargs = materialise(self.signature, self._placement)
        return Sample(self.first + offset, args, kwargs, signature=self.signature, data_of=self.full)

    def starting_at(self, index: int) -> SignatureRecord:
        """The same record from sample ``index`` on (a resumed replay)."""
        skipped = index - self.first
        if not 0 <= skipped < self.repeat:
            raise IndexError(f"sample {index} is not in {self!r}")
        return SignatureRecord(index, self.repeat - skipped, self._array, self.full, self.call, self.key,
                               self._signature, self._placement)
