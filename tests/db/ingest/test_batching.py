"""The one batcher both imports cut their input with: capped by rows and by bytes, a unit never split.

The imports' own tests (a damaged gzip part-way, `--batch-lines`, `--batch-rows`) check it in place;
these say what holds of it whatever the units.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from preflab.db.ingest.batching import capped_batches
from preflab.errors import InputError

# A unit: (its rows, its bytes).
units = st.lists(st.tuples(st.integers(1, 4), st.integers(0, 50)), max_size=40)


@pytest.mark.property
@given(units=units, max_rows=st.integers(1, 10), max_bytes=st.integers(1, 120))
def test_every_unit_once_in_order_and_only_the_last_batch_under_its_caps(units, max_rows, max_bytes):
    got = list(capped_batches(units, max_rows, max_bytes, size=lambda u: u[1], rows=lambda u: u[0]))
    assert [u for batch in got for u in batch] == units
    for k, batch in enumerate(got):
        rows, size = sum(u[0] for u in batch), sum(u[1] for u in batch)
        before = (sum(u[0] for u in batch[:-1]), sum(u[1] for u in batch[:-1]))
        assert before[0] < max_rows and before[1] < max_bytes  # its last unit was what crossed a cap
        if k < len(got) - 1:
            assert rows >= max_rows or size >= max_bytes


def test_a_unit_counts_one_row_unless_told():
    assert list(capped_batches("abcde", 2, 100, size=len)) == [["a", "b"], ["c", "d"], ["e"]]
    assert list(capped_batches(["ab", "c", "defg", "h"], 10, 3, size=len)) == [["ab", "c"], ["defg"], ["h"]]


def test_damage_part_way_keeps_the_units_read_before_it():
    def damaged():
        yield from "abc"
        raise InputError("the compressed data is damaged")

    got = capped_batches(damaged(), 2, 100, size=len)
    assert next(got) == ["a", "b"]
    assert next(got) == ["c"]  # read before the damage: yielded, then the error
    with pytest.raises(InputError, match="damaged"):
        next(got)
