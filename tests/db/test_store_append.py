"""bulk.append_rows: new rows with their ids, defaults filled, a unique-key race raised to be retried."""

import pytest
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError

from preflab.db.bulk import append_rows
from preflab.db.models import Candidate, Prompt, RawRecord
from preflab.db.store import payload_hash, quarantine, store_raw
from preflab.db.transactions import retry_reason


def test_append_rows_returns_the_ids_in_order_with_defaults_filled(sessions):
    with sessions.begin() as s:
        prompt_ids = append_rows(s, Prompt.__table__, [{"text": f"p{i}", "content_hash": f"h{i}"} for i in range(3)])
        cand_ids = append_rows(
            s,
            Candidate.__table__,
            [
                {"prompt_id": pid, "text": f"c{pid}", "content_hash": "x", "sampling": {"t": 0.7} if n else None}
                for n, pid in enumerate(prompt_ids)
            ],
        )
    with sessions.begin() as s:
        prompts = {p.id: p for p in s.scalars(select(Prompt))}
        assert [prompts[i].text for i in prompt_ids] == ["p0", "p1", "p2"]
        assert all(p.created_at is not None for p in prompts.values())
        candidates = {c.id: c for c in s.scalars(select(Candidate))}
        assert [(candidates[i].prompt_id, candidates[i].sampling) for i in cand_ids] == [
            (prompt_ids[0], None),
            (prompt_ids[1], {"t": 0.7}),
            (prompt_ids[2], {"t": 0.7}),
        ]
        assert {c.created_at for c in candidates.values()} != {None}


def test_a_row_another_writer_added_first_is_a_retryable_conflict(sessions):
    row = {"source": "import:rankings", "payload": "{}", "payload_hash": "ab" * 32, "status": "ok"}
    with sessions.begin() as s:
        [first] = append_rows(s, RawRecord.__table__, [row])
    with pytest.raises(DBAPIError) as caught, sessions.begin() as s:
        append_rows(s, RawRecord.__table__, [dict(row, locator="2")])
    assert retry_reason(caught.value) == "another writer added the same row first"
    with sessions.begin() as s:
        assert s.scalars(select(RawRecord.id)).all() == [first]


def _raw(i):
    return {"source": "import:rankings", "payload": f"{i}", "payload_hash": f"{i:064x}", "status": "ok"}


def test_sqlite_appends_skipping_rows_stored_before(sessions):
    skip = ("payload_hash", "source")
    with sessions.begin() as s:
        if s.connection().dialect.name != "sqlite":  # COPY cannot skip a row: store_raw looks them up first
            with pytest.raises(ValueError, match="SQLite only"):
                append_rows(s, RawRecord.__table__, [_raw(0)], skip=skip)
            return
        ids = append_rows(s, RawRecord.__table__, [_raw(0), _raw(1)], skip=skip)
        assert append_rows(s, RawRecord.__table__, [_raw(1), _raw(2)], skip=skip) is None  # one was there
        stored = dict(s.execute(select(RawRecord.payload, RawRecord.id)).all())
    assert [stored["0"], stored["1"]] == ids and stored["2"] > ids[1] and len(stored) == 3


def test_store_raw_appending_says_which_payloads_it_stored_and_keeps_the_others_status(sessions):
    with sessions.begin() as s:
        first = store_raw(s, "import:x", "file", [("1", "a"), ("2", "b")], append=True)
        quarantine(s, {first[payload_hash("b")][0]: "bad"})
    with sessions.begin() as s:
        again = store_raw(s, "import:x", "file", [("1", "a"), ("2", "b"), ("3", "c"), ("4", "c")], append=True)
    assert again.new == {payload_hash("c")}
    assert again[payload_hash("a")] == first[payload_hash("a")]
    assert again[payload_hash("b")] == (first[payload_hash("b")][0], "quarantined")
    assert again[payload_hash("c")][0] > first[payload_hash("b")][0]
    with sessions.begin() as s:  # another source's payload is another record
        other = store_raw(s, "import:y", "file", [("1", "a")], append=True)
    assert other.new == {payload_hash("a")} and other[payload_hash("a")][0] != first[payload_hash("a")][0]
