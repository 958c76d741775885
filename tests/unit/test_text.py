"""guardscope.text's sample lists: runs of consecutive indices, from any iterable of ints."""

from __future__ import annotations

from array import array

import numpy as np

from guardscope.text import format_runs, format_samples, sample_runs


def test_sample_runs_from_lists_arrays_and_generators():
    assert sample_runs([1, 2, 3, 5]) == [(1, 3), (5, 5)]
    assert sample_runs(array("q", [1, 2, 3, 5, 7, 8])) == [(1, 3), (5, 5), (7, 8)]
    assert sample_runs(np.array([4, 9, 10])) == [(4, 4), (9, 10)]
    assert sample_runs(i for i in (2, 3)) == [(2, 3)]
    assert sample_runs([]) == [] and sample_runs(array("q")) == []


def test_unsorted_members_are_sorted_without_touching_the_callers_array():
    members = array("q", [5, 3, 4, 3, 9])
    assert sample_runs(members) == [(3, 5), (9, 9)]
    assert members.tolist() == [5, 3, 4, 3, 9]


def test_format_samples_shows_the_first_runs_and_counts_the_rest():
    members = array("q", [*range(0, 3), *range(10, 2000, 2)])
    assert format_samples(members, limit=2) == "0–2, 10 … and 994 more"
    assert format_samples([]) == "none"


def test_format_runs_is_format_samples_of_runs_found_already():
    members = array("q", [1, 2, 3, 7, 9, 10])
    assert format_runs(sample_runs(members)) == format_samples(members) == "1–3, 7, 9–10"
