"""The laws of a ranking's identity, on generated rows in the ten formats' real shapes and as JSON Lines rankings.

Encoding: the same rows give the same store (its rankings, pairs, export content hash and leaderboard:
`law_store.snapshot`) whether they come as JSON Lines with any key order and spacing, whole floats written
as 7 or 7.0, Parquet, CSV (where the shape is flat), a saved `datasets.Dataset` or a Hub-style folder; and
once a store holds them, another encoding adds nothing.
Order and split: the rows shuffled, imported in two halves, or the halves imported at once by two threads,
give the same store, bootstrap intervals included (the store's battles are numbered by model name and
turned by it, so the draws do not follow the order the rankings were stored in); importing twice adds nothing.
On SQLite and Postgres (the `sessions` fixture). A store is emptied between examples.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preflab.db.ingest.datasets.job import DatasetImportSettings, import_dataset
from preflab.db.ingest.jsonl import import_file, import_rankings_batch
from tests.db.ingest.law_rows import FORMATS, GROUPED, rows_of
from tests.db.ingest.law_store import emptied, encodings, imported, jsonl, same, snapshot
from tests.properties import examples

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

ALL = (*FORMATS, "rankings")


def summary(sessions, fmt: str, path: Path) -> tuple[int, int, int]:
    """(rankings added, duplicates, quarantined) of one import."""
    if fmt == "rankings":
        done = import_file(sessions, path, import_rankings_batch)
        return done.imported, done.duplicates, done.quarantined
    done = import_dataset(sessions, str(path), DatasetImportSettings(format=fmt))
    return done.rankings, done.duplicates, done.quarantined


@pytest.mark.parametrize("fmt", ALL)
@settings(max_examples=examples(3))
@given(data=st.data())
def test_the_same_rows_in_any_encoding_are_the_same_store(sessions, tmp_path_factory, fmt, data):
    rows, flat = data.draw(rows_of(fmt))
    folder = tmp_path_factory.mktemp("rows")
    files = encodings(fmt, rows, flat, folder)
    emptied(sessions)
    added, duplicates, quarantined = summary(sessions, fmt, files.pop("jsonl"))
    want = snapshot(sessions, folder / "export-0")
    for name, path in files.items():  # into the store holding them: recognised row for row, nothing added
        assert summary(sessions, fmt, path) == (0, duplicates + added, quarantined), name
    assert same(snapshot(sessions, folder / "export-again"), want)
    # Alone in a store, the rows as Parquet (or JSON Lines written another way) make the same store.
    emptied(sessions)
    assert imported(sessions, fmt, files.get("parquet") or files[next(iter(files))]) == added
    assert same(snapshot(sessions, folder / "export-alone"), want)


def shuffled(fmt: str, rows: list, order: list[int]) -> list:
    """The rows in another order (oasst2's trees, HelpSteer2's prompts: their rows stay together and in order)."""
    flat = [rows[i] for i in order]
    return [r for group in flat for r in group] if fmt in GROUPED else flat


@pytest.mark.parametrize("fmt", ALL)
@settings(max_examples=examples(3))
@given(data=st.data())
def test_order_and_split_make_no_difference(sessions, tmp_path_factory, fmt, data):
    rows, _ = data.draw(rows_of(fmt))
    order = data.draw(st.permutations(range(len(rows))))
    cut = data.draw(st.integers(1, len(rows) - 1))
    folder = tmp_path_factory.mktemp("rows")
    whole = jsonl(folder / "whole.jsonl", shuffled(fmt, rows, range(len(rows))))
    halves = [
        jsonl(folder / "first.jsonl", shuffled(fmt, rows, order[:cut])),
        jsonl(folder / "second.jsonl", shuffled(fmt, rows, order[cut:])),
    ]
    emptied(sessions)
    imported(sessions, fmt, whole)
    want = snapshot(sessions, folder / "export-whole")
    assert imported(sessions, fmt, whole) == 0  # importing twice adds nothing

    emptied(sessions)
    imported(sessions, fmt, jsonl(folder / "shuffled.jsonl", shuffled(fmt, rows, order)))
    assert same(snapshot(sessions, folder / "export-shuffled"), want), "shuffled"

    emptied(sessions)
    for half in halves:
        imported(sessions, fmt, half)
    assert same(snapshot(sessions, folder / "export-halves"), want), "in two halves"

    emptied(sessions)
    errors = []

    def run(path: Path) -> None:
        try:
            imported(sessions, fmt, path)
        except Exception as exc:  # said below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(half,)) for half in halves]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert same(snapshot(sessions, folder / "export-at-once"), want), "two halves at once"
