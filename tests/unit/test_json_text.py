"""guardscope's one JSON style: long int lists (an analysis's members) formatted by Arrow read back
as the same numbers, in the same text Python's json module gives."""

from __future__ import annotations

import json
from array import array

import numpy as np

from guardscope.json_text import as_read, dumps, ints_text


def test_long_int_lists_are_the_text_json_writes():
    values = np.random.default_rng(0).integers(-(2**62), 2**62, size=3 * (1 << 20) // 2 + 7)
    values[:5] = [0, -1, 1, 2**63 - 1, -(2**63)]
    members = array("q", values.tobytes())
    assert ints_text(members, ",") == json.dumps(values.tolist(), separators=(",", ":"))
    assert ints_text(members) == json.dumps(values.tolist())
    assert ints_text(values.tolist()[:5000]) == json.dumps(values.tolist()[:5000])
    assert ints_text([]) == "[]" and ints_text(array("q")) == "[]"


def test_ints_beyond_64_bits_are_written_as_python_writes_them():
    values = list(range(5000)) + [2**70]
    assert ints_text(values) == json.dumps(values)


def test_a_document_with_long_members_reads_back_whole():
    members = array("q", range(10_000))
    document = {"topologies": [{"id": 0, "samples": members, "dims": [1, 2]},
                               {"id": 1, "samples": list(range(5, 9000, 3))}]}
    text = dumps(document)
    read = json.loads(text)
    assert read["topologies"][0]["samples"] == list(range(10_000))
    assert read["topologies"][1]["samples"] == list(range(5, 9000, 3))
    assert text.endswith("]\n}\n") or text.endswith("}\n")
    assert as_read(document)["topologies"][0]["samples"] is members
