"""bulk.append_rows: new rows with their ids, defaults filled, a unique-key race raised to be retried."""

import pytest
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError

from preflab.db.bulk import append_rows
from preflab.db.engine import retry_reason
from preflab.db.models import Candidate, Prompt, RawRecord


def test_append_rows_returns_the_ids_in_order_with_defaults_filled(sessions):
    with sessions.begin() as s:
        prompt_ids = append_rows(s, Prompt.__table__, [{"text": f"p{i}", "content_hash": f"h{i}"} for i in range(3)])
        cand_ids = append_rows(s, Candidate.__table__, [
            {"prompt_id": pid, "text": f"c{pid}", "content_hash": "x", "sampling": {"t": 0.7} if n else None}
            for n, pid in enumerate(prompt_ids)])
    with sessions.begin() as s:
        prompts = {p.id: p for p in s.scalars(select(Prompt))}
        assert [prompts[i].text for i in prompt_ids] == ["p0", "p1", "p2"]
        assert all(p.created_at is not None for p in prompts.values())
        candidates = {c.id: c for c in s.scalars(select(Candidate))}
        assert [(candidates[i].prompt_id, candidates[i].sampling) for i in cand_ids] == [
            (prompt_ids[0], None), (prompt_ids[1], {"t": 0.7}), (prompt_ids[2], {"t": 0.7})]
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
