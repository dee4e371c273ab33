"""preflab.db.bulk on SQLite and Postgres: defaults, JSON, timestamps, conflicts and lookups."""

from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError, IntegrityError

from preflab.db.bulk import IN_CHUNK, append_rows, insert_rows, lookup
from preflab.db.models import Annotator, Candidate, Prompt, Ranking, RawRecord


def utc(moment: datetime) -> datetime:
    """SQLite hands timestamps back naive (they are stored in UTC)."""
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def test_rows_get_python_defaults_and_keep_json_and_timestamps(sessions):
    received = datetime(2025, 3, 4, 5, 6, 7, tzinfo=timezone.utc)
    before = datetime.now(timezone.utc) - timedelta(seconds=1)
    with sessions.begin() as s:
        insert_rows(s, Prompt.__table__, [{"text": "P", "content_hash": "p"}])
        pid = s.scalar(select(Prompt.id))
        insert_rows(
            s,
            Candidate.__table__,
            [
                {"prompt_id": pid, "text": "A", "content_hash": "a", "sampling": {"temperature": 0.7, "stop": ["\n"]}},
                {"prompt_id": pid, "text": "B", "content_hash": "b", "sampling": None},
            ],
        )
        insert_rows(s, Annotator.__table__, [{"kind": "human", "name": "alice", "pseudonym": "human-1"}])
        insert_rows(
            s, RawRecord.__table__, [{"source": "test", "payload": "{}", "payload_hash": "x", "received_at": received}]
        )
        insert_rows(
            s,
            Ranking.__table__,
            [{"prompt_id": pid, "annotator_id": s.scalar(select(Annotator.id)), "source": "test", "external_id": "r1"}],
        )
        insert_rows(s, Prompt.__table__, [])
    with sessions.begin() as s:
        a, b = s.scalars(select(Candidate).order_by(Candidate.content_hash))
        assert a.sampling == {"temperature": 0.7, "stop": ["\n"]} and b.sampling is None
        assert before <= utc(a.created_at) <= datetime.now(timezone.utc)
        raw = s.scalar(select(RawRecord))
        assert raw.status == "ok" and utc(raw.received_at) == received
        ranking = s.scalar(select(Ranking))
        assert (ranking.version, ranking.status, ranking.n_tiers, ranking.same_as_shown) == (1, "valid", 0, False)
        assert utc(ranking.created_at) >= before and s.scalar(select(Prompt.text)) == "P"


def test_appended_json_reads_back_as_the_value_written(sessions):
    # append_rows writes JSON columns as orjson's text: the same values come back, on both databases
    messages = [{"role": "user", "content": 'مرحبا 你好 🙂 "quoted"\n'}, {"role": "assistant", "content": "x"}]
    sampling = {"temperature": 0.7, "nan": float("nan"), "nested": {"list": [1, 2.5, None, True]}}
    with sessions.begin() as s:
        (pid,) = append_rows(s, Prompt.__table__, [{"text": "P", "content_hash": "p", "messages": messages}])
        append_rows(
            s,
            Candidate.__table__,
            [
                {"prompt_id": pid, "text": "A", "content_hash": "a", "sampling": sampling},
                {"prompt_id": pid, "text": "B", "content_hash": "b", "sampling": {"seed": 2**70}},
            ],
        )
    with sessions.begin() as s:
        assert s.scalar(select(Prompt.messages)) == messages
        # NaN, which is not JSON, is stored as null; an integer past 64 bits goes the standard library's way
        assert list(s.scalars(select(Candidate.sampling).order_by(Candidate.content_hash))) == [
            {**sampling, "nan": None},
            {"seed": 2**70},
        ]


def test_conflict_skips_rows_that_exist_and_a_plain_insert_refuses_them(sessions):
    with sessions.begin() as s:
        insert_rows(s, Prompt.__table__, [{"text": "first", "content_hash": "h"}], ["content_hash"])
        insert_rows(
            s,
            Prompt.__table__,
            [{"text": "second", "content_hash": "h"}, {"text": "other", "content_hash": "k"}],
            ["content_hash"],
        )
    with sessions.begin() as s:
        assert dict(s.execute(select(Prompt.content_hash, Prompt.text)).all()) == {"h": "first", "k": "other"}
    with pytest.raises(IntegrityError), sessions.begin() as s:
        insert_rows(s, Prompt.__table__, [{"text": "again", "content_hash": "h"}])
    with sessions.begin() as s:
        assert s.scalar(select(Prompt.text).where(Prompt.content_hash == "h")) == "first"


def test_lookup_finds_each_row_once_across_chunks(sessions):
    n = 2 * IN_CHUNK + 7
    with sessions.begin() as s:
        insert_rows(s, Prompt.__table__, [{"text": f"p{i}", "content_hash": f"h{i}"} for i in range(n)])
    with sessions.begin() as s:
        wanted = (f"h{i}" for i in [*range(n), 0, 1, n + 5])  # any iterable; repeats and misses are fine
        found = lookup(s, Prompt.__table__, ("content_hash", "text"), "content_hash", wanted)
        assert sorted(found) == sorted((f"h{i}", f"p{i}") for i in range(n))
        assert all(type(row) is tuple for row in found)
        ids = {text: pid for pid, text in lookup(s, Prompt.__table__, ("id", "text"), "content_hash", ["h3", "h700"])}
        by_id = lookup(s, Prompt.__table__, ("text",), "id", [ids["p700"], ids["p3"], -1])
        assert sorted(by_id) == [("p3",), ("p700",)]
        assert lookup(s, Prompt.__table__, ("id",), "content_hash", set()) == []


def test_lookup_sees_pending_objects_and_converts_what_sqlalchemy_converts(sessions):
    """The driver's rows are used only where SQLAlchemy would not change them; pending objects are flushed first."""
    received = datetime(2025, 3, 4, 5, 6, 7, tzinfo=timezone.utc)
    with sessions.begin() as s:
        s.add(RawRecord(source="test", payload="{}", payload_hash="x", received_at=received))
        # Integers and strings: from the driver's cursor, after the pending row is flushed.
        ((rid, payload_hash),) = lookup(s, RawRecord.__table__, ("id", "payload_hash"), "payload_hash", ["x"])
        # A timestamp: through SQLAlchemy, which turns SQLite's text into a datetime.
        (when,) = lookup(s, RawRecord.__table__, ("received_at",), "id", [rid])[0]
        assert payload_hash == "x" and isinstance(rid, int) and utc(when) == received


def test_appended_rows_read_back_as_inserted_ones_whatever_the_values(sessions, monkeypatch):
    """append_rows (on Postgres a COPY, binary where psycopg can write every value so) stores what insert_rows does.

    The second batch gives a text column a number and a timestamp no time zone, the third an integer past its
    column's 32 bits: a binary COPY would write those by the column's type and fail, read the time in another zone
    or cut the integer to its low bits, so those batches go as text (and the third is refused).
    """
    import preflab.db.bulk as bulk

    binary = []
    choose = bulk._binary_oids

    def chosen(*args):
        oids = choose(*args)
        binary.append(oids is not None)
        return oids

    monkeypatch.setattr(bulk, "_binary_oids", chosen)
    texts = ["tab\there, line\nthere, back\\slash", 'مرحبا 你好 🙂 "q"', "x" * 20_000, ""]
    first = [
        {
            "prompt_id": 7,
            "annotator_id": 3,
            "source": "import:test",
            "external_id": f"e{i}",
            "n_tiers": i,
            "same_as_shown": i % 2 == 0,
            "lead_time": [1.5, None, 2, 0.0][i],
            "judge_run": text[:100],
            "details": [{"scores": [1, 2.5, None]}, None, {"text": text}, {"text": text}][i],
            "created_at": datetime(2025, 3, 4, 5, 6, i, tzinfo=timezone(timedelta(hours=i))),
        }
        for i, text in enumerate(texts)
    ]
    second = [
        {**row, "external_id": 100 + i, "created_at": datetime(2025, 3, 4, 5, 6, i)} for i, row in enumerate(first)
    ]
    results = []
    for how in ("append", "insert"):
        with sessions.begin() as s:
            for rows in (first, second):
                rows = [{**row, "source": how} for row in rows]
                if how == "append":
                    append_rows(s, Ranking.__table__, rows)
                else:
                    insert_rows(s, Ranking.__table__, rows)
        with sessions.begin() as s:
            results.append(
                [
                    (
                        r.external_id,
                        r.n_tiers,
                        r.same_as_shown,
                        r.lead_time,
                        r.judge_run,
                        r.details,
                        utc(r.created_at) if r.created_at.tzinfo else r.created_at,
                    )
                    for r in s.scalars(select(Ranking).where(Ranking.source == how).order_by(Ranking.id))
                ]
            )
    assert results[0] == results[1]
    assert [row[0] for row in results[0]] == ["e0", "e1", "e2", "e3", "100", "101", "102", "103"]
    postgres = sessions.kw["bind"].dialect.name == "postgresql"
    if postgres:
        assert binary == [True, False]
        with pytest.raises(DBAPIError, match="out of range"), sessions.begin() as s:
            append_rows(s, Ranking.__table__, [{**first[0], "source": "too big", "prompt_id": 2**32 + 7}])
        assert binary == [True, False, False]
        # a double given an integer past 2**53 (which psycopg's binary writer refuses past 2**1024): as text
        with sessions.begin() as s:
            append_rows(s, Ranking.__table__, [{**first[0], "source": "big float", "lead_time": 2**60 + 1}])
        with sessions.begin() as s:
            assert s.scalar(select(Ranking.lead_time).where(Ranking.source == "big float")) == float(2**60)
        assert binary == [True, False, False, False]
