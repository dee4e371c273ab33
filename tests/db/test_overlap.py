"""`commit_behind`: each batch in its own transaction, committed on a second thread while the next is read."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from preflab.db.models import Prompt
from preflab.db.overlap import commit_behind
from preflab.db.store import content_hash, ensure_prompts


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
    assert threads == {threading.current_thread().name}  # the batches are read on the caller's thread


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
        commit_behind(sessions, iter([["x"], ["boom"], ["never"]]), write,
                      lambda batch, result, retries: done.append(batch))
    assert done == [["x"]]
    assert _stored(sessions) == ["x"]


def test_a_write_that_lost_a_race_is_run_again_as_a_whole(sessions):
    attempts = {"n": 0}

    def write(session, batch):
        n = _write(session, batch)
        if batch == ["raced"] and attempts["n"] == 0:
            attempts["n"] += 1
            raise OperationalError("INSERT", {}, Exception("database is locked"))
        return n

    done = []
    commit_behind(sessions, iter([["first"], ["raced"], ["last"]]), write,
                  lambda batch, result, retries: done.append((batch, retries)))
    assert done == [(["first"], 0), (["raced"], 1), (["last"], 0)]
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(Prompt)) == 3
