"""`commit_behind`: each batch in its own transaction, committed on a second thread while the next is read."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from preflab.db import overlap
from preflab.db.models import Prompt
from preflab.db.overlap import aside, commit_behind
from preflab.db.store import content_hash, ensure_prompts

sqlite_only = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


def _prompts(texts):
    return {content_hash(t): {"text": t} for t in texts}


def _write(session: Session, batch: list[str]) -> int:
    return len(ensure_prompts(session, _prompts(batch)))


def _stored(sessions) -> list[str]:
    with sessions() as session:
        return list(session.scalars(select(Prompt.text).order_by(Prompt.id)))


def test_batches_commit_in_order_and_reading_overlaps_the_commit(sessions):
    batches = [[f"batch {b} prompt {i}" for i in range(50)] for b in range(4)]
    seen, threads = [], set()

    def read():
        for batch in batches:
            threads.add(threading.current_thread().name)
            yield batch

    commit_behind(sessions, read(), _write, lambda batch, result, retries: seen.append((batch[0], result, retries)))
    assert seen == [(batch[0], 50, 0) for batch in batches]
    assert _stored(sessions) == [text for batch in batches for text in batch]
    # SQLite: read on the caller's thread (executemany's rows would wait for the lock); Postgres: the first there,
    # the others on a thread beside it
    postgres = sessions.kw["bind"].dialect.name == "postgresql"
    here = threading.current_thread().name
    assert threads == ({here, "preflab-read-ahead_0"} if postgres else {here})


def test_an_error_while_reading_keeps_every_batch_before_it_whole(sessions):
    def read():
        yield ["a", "b"]
        yield ["c"]
        raise ValueError("line 3 is damaged")

    done = []
    with pytest.raises(ValueError, match="damaged"):
        commit_behind(sessions, read(), _write, lambda batch, result, retries: done.append(batch))
    assert done == [["a", "b"], ["c"]]
    assert _stored(sessions) == ["a", "b", "c"]


def test_a_failed_write_is_rolled_back_and_stops_after_the_batch_before_commits(sessions):
    def write(session, batch):
        n = _write(session, batch)
        if batch == ["boom"]:
            raise RuntimeError("cannot write this batch")
        return n

    done = []
    with pytest.raises(RuntimeError):
        commit_behind(
            sessions, iter([["x"], ["boom"], ["never"]]), write, lambda batch, result, retries: done.append(batch)
        )
    assert done == [["x"]]
    assert _stored(sessions) == ["x"]


def test_a_failed_write_stops_the_reading_one_batch_past_it(sessions):
    read, closed = [], []

    def batches():
        try:
            for name in ("x", "boom", "next", "never", "nor this"):
                read.append(name)
                yield [name]
        finally:
            closed.append(threading.current_thread().name)

    def write(session, batch):
        if batch == ["boom"]:
            raise RuntimeError("cannot write this batch")
        return _write(session, batch)

    with pytest.raises(RuntimeError):
        commit_behind(sessions, batches(), write, lambda *_: None)
    # Postgres reads the batch after the failed one beside its write, then stops; SQLite stops at the failed one
    postgres = sessions.kw["bind"].dialect.name == "postgresql"
    assert read == (["x", "boom", "next"] if postgres else ["x", "boom"])
    assert _stored(sessions) == ["x"]
    if postgres:
        assert len(closed) == 1 and not [t for t in threading.enumerate() if t.name.startswith("preflab-read-ahead")]


def test_a_write_that_lost_a_race_is_run_again_as_a_whole(sessions):
    attempts = {"n": 0}

    def write(session, batch):
        n = _write(session, batch)
        if batch == ["raced"] and attempts["n"] == 0:
            attempts["n"] += 1
            raise OperationalError("INSERT", {}, Exception("database is locked"))
        return n

    done = []
    commit_behind(
        sessions,
        iter([["first"], ["raced"], ["last"]]),
        write,
        lambda batch, result, retries: done.append((batch, retries)),
    )
    assert done == [(["first"], 0), (["raced"], 1), (["last"], 0)]
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(Prompt)) == 3


@sqlite_only  # Postgres has no log to checkpoint
def test_sqlite_checkpoints_beside_the_next_batch_and_gives_connections_back_as_they_were(sessions, monkeypatch):
    engine, calls, real = sessions.kw["bind"], [], overlap.checkpoint

    def checkpoint(bound):
        calls.append(threading.current_thread().name)
        return real(bound)

    monkeypatch.setattr(overlap, "checkpoint", checkpoint)
    batches = [[f"batch {b} prompt {i}" for i in range(50)] for b in range(5)]
    commit_behind(sessions, iter(batches), _write, lambda *_: None)
    assert calls and set(calls) == {"preflab-checkpoint_0"}
    assert _stored(sessions) == [text for batch in batches for text in batch]
    held = [engine.connect() for _ in range(3)]  # the pool's connections: automatic checkpoints as before
    try:
        assert {c.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() for c in held} == {1000}
    finally:
        for connection in held:
            connection.close()


@sqlite_only
def test_sqlite_copies_the_log_in_place_once_it_is_big(sessions, monkeypatch):
    monkeypatch.setattr(overlap, "LOG_PAGES", 1)  # every batch fills the log past it
    calls, real = [], overlap.checkpoint
    monkeypatch.setattr(overlap, "checkpoint", lambda bound: calls.append(bound) or real(bound))
    commit_behind(sessions, iter([[f"b{b} p{i}" for i in range(50)] for b in range(4)]), _write, lambda *_: None)
    assert len(calls) == 1  # the first COMMIT's checkpoint beside; the log is big: every other one in place
    assert len(_stored(sessions)) == 200


def _pid_and(value):
    return os.getpid(), value


def _fails():
    raise ValueError("the file is damaged")


def test_aside_runs_in_a_child_process_and_gives_its_result_or_exception():
    with aside(_pid_and, "ok") as first:
        pid, value = first.result()
    assert value == "ok" and pid != os.getpid()
    with aside(_fails) as first, pytest.raises(ValueError, match="damaged"):
        first.result()
    with aside(_pid_and, "twice") as first:
        assert first.result() == first.result() and first.done()  # asked again, as a Future's
    with aside(_pid_and, "here", fork=False) as first:
        assert first.done() and first.result() == (os.getpid(), "here")


def test_aside_runs_again_here_when_the_child_died_and_stops_one_no_longer_needed():
    with aside(time.sleep, 30) as child:
        os.kill(child._process.pid, signal.SIGKILL)
        child._process.join()
        child._fn, child._args = _pid_and, ("again",)  # what the parent runs in its place
        assert child.result() == (os.getpid(), "again")
    start = time.monotonic()
    with aside(time.sleep, 30) as child:
        assert not child.done()
    assert not child._process.is_alive() and time.monotonic() - start < 10
