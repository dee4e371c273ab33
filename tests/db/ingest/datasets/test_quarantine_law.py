"""The law of what an import quarantines: everything its summary counts is in `preflab quarantine list`.

Whatever the rows and however often they are read (every criterion, or one with --criterion, from another
file with the rows in another order), after each import: every row it counts quarantined, every reply it
sets aside alone, and every criterion of a row that gave no ranking, is listed with the reason the import
gave (issue 46 §1c: a row stored ok by an earlier import was counted but not listed); its counts are those
of the rows' own parse; and nothing is listed that no import said. Generated UltraFeedback rows, with
ratings "N/A", null, missing or broken and empty completions, on SQLite and Postgres.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from preflab.db.ingest.datasets.summary import part_payload
from preflab.db.ingest.datasets.ultrafeedback import FORMAT
from preflab.db.models import RawRecord, RawStatus
from preflab.errors import Invalid
from tests.db.ingest.datasets.shapes_b import run_import, write_jsonl
from tests.properties import examples

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

MISSING = object()  # a key left out of the row
# None: every criterion the format gives (fine_grained only when named)
CRITERIA = (None, "overall", "honesty", "helpfulness", "fine_grained")
ASPECTS = ("helpfulness", "honesty", "instruction_following", "truthfulness")


@st.composite
def completions(draw) -> dict:
    ratings = {aspect: draw(st.sampled_from(["1", "3", "5", "N/A", None, MISSING, "five"])) for aspect in ASPECTS}
    completion = {
        "model": draw(st.sampled_from(["gpt-4", "bard", "alpaca-7b"])),
        "response": draw(st.sampled_from(["", "Yes.", "No.", "Maybe.", "Seven."])),
        "overall_score": draw(st.sampled_from([2.0, 7.0, 8.5, None, MISSING])),
        "fine-grained_score": draw(st.sampled_from([1.5, 4.0, MISSING])),
        "annotations": {a: {"Rating": r, "Rationale": "."} for a, r in ratings.items() if r is not MISSING},
    }
    return {k: v for k, v in completion.items() if v is not MISSING}


@st.composite
def imports(draw) -> tuple[list[dict], list[tuple[str, bool]]]:
    """Rows (each its own instruction), and the imports to run: (criterion, whether the rows come reversed)."""
    n = draw(st.integers(1, 4))
    rows = [
        {"instruction": f"Question {i}?", "completions": draw(st.lists(completions(), min_size=1, max_size=4))}
        for i in range(n)
    ]
    runs = draw(st.lists(st.tuples(st.sampled_from(CRITERIA), st.booleans()), min_size=2, max_size=3))
    return rows, runs


def canonical(payload: str) -> str:
    return json.dumps(json.loads(payload), sort_keys=True)


def expected(rows: list[dict], criterion: str | None) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """What the rows' own parse quarantines: (row, reason) of each row, and (part, reason) of each set aside (a
    reply, or a criterion that gave the row no ranking)."""
    whole, parts = [], []
    for data in rows:
        try:
            records = FORMAT.parse(data, criterion=criterion)
        except Invalid as exc:
            whole.append((canonical(json.dumps(data)), str(exc)))
            continue
        parts += [(canonical(part_payload(value)), reason) for r in records for _, value, reason in r.set_aside]
    return whole, parts


def listed(sessions) -> set[tuple[str, str]]:
    """What `preflab quarantine list` shows, each record's payload (as `quarantine show` gives it) with its reason."""
    with sessions.begin() as s:
        query = select(RawRecord.payload, RawRecord.reason).where(RawRecord.status == RawStatus.quarantined.value)
        return {(canonical(payload), reason) for payload, reason in s.execute(query)}


def test_every_row_an_import_counts_quarantined_is_listed_with_its_reason(sessions, tmp_path):
    said: set[tuple[str, str]] = set()  # what every import so far quarantined (examples share the database)
    run = iter(range(10**6))

    @settings(max_examples=examples(8))
    @given(imports())
    def law(case):
        rows, runs = case
        for criterion, reversed_ in runs:
            order = rows[::-1] if reversed_ else rows
            path = write_jsonl(tmp_path / f"uf{next(run)}.jsonl", order)
            summary = run_import(sessions, path, "ultrafeedback", criterion=criterion)
            whole, parts = expected(order, criterion)
            assert (summary.quarantined, summary.quarantined_replies + summary.quarantined_criteria) == (
                len(whole),
                len(parts),
            )
            assert summary.reasons == dict(Counter(reason for _, reason in whole))
            said.update(whole + parts)
            shown = listed(sessions)
            assert set(whole + parts) <= shown, "counted quarantined, but not listed with its reason"
            assert shown <= said, "listed, but no import said so"

    law()
