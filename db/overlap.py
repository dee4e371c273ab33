"""Batches written one transaction each, every COMMIT finishing on a second thread while the next batch is read.

An import's COMMIT is long and holds no Python lock: SQLite writes the batch's pages to its log (a third of
a `preflab import dataset` run on SQLite, bench/README.md, issue 30), Postgres waits for its server. Reading
and parsing the next batch is Python's own work. `commit_behind` runs the two side by side: it writes a
batch in a transaction (on this thread), hands the COMMIT to a committing thread, and only then asks the
batches' iterator for the next one, whose reading overlaps the COMMIT. The next batch's writes wait for
that COMMIT, so the transactions still run one after another, in order; at most two batches are held.

A transaction that lost a race (`engine.retry_reason`) at a write or at COMMIT is run again as a whole by
`engine.in_transaction`, synchronously, as every checkpointing job's is: the writes must be idempotent.
An error that cannot be retried stops the run once the COMMIT in flight has finished, so every batch
before it is committed whole and none after it is begun.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from preflab.db.engine import in_transaction, retry_reason

B = TypeVar("B")
R = TypeVar("R")


def _commit(session: Session) -> None:
    try:
        session.commit()
    finally:
        session.close()


def commit_behind(sessions: sessionmaker[Session], batches: Iterable[B], write: Callable[[Session, B], R],
                  done: Callable[[B, R, int], None]) -> None:
    """`write(session, batch)` for each batch in its own transaction, committed behind the next batch's reading.

    `done(batch, result, retries)` is called on this thread once the batch's transaction has committed,
    in order (`retries`: how many times it was run again after losing a race).
    """
    with ThreadPoolExecutor(1, thread_name_prefix="preflab-commit") as committer:
        behind: tuple[Future[None], B, R] | None = None
        try:
            for batch in batches:  # reading the next batch overlaps the COMMIT behind
                if behind is not None:
                    settling, behind = behind, None
                    _settle(sessions, write, done, *settling)
                session = sessions()
                try:
                    session.begin()
                    result = write(session, batch)
                except DBAPIError as exc:
                    session.close()  # rolls back
                    if retry_reason(exc) is None:
                        raise
                    _again(sessions, write, done, batch, 1)
                    continue
                except BaseException:
                    session.close()
                    raise
                behind = (committer.submit(_commit, session), batch, result)
        finally:
            if behind is not None:  # the last batch, or an error while reading: the batch before it is kept whole
                _settle(sessions, write, done, *behind)


def _settle(sessions: sessionmaker[Session], write: Callable[[Session, B], R], done: Callable[[B, R, int], None],
            future: Future[None], batch: B, result: R) -> None:
    try:
        future.result()
    except DBAPIError as exc:
        if retry_reason(exc) is None:
            raise
        _again(sessions, write, done, batch, 1)  # unknown whether it committed: the writes are idempotent
        return
    done(batch, result, 0)


def _again(sessions: sessionmaker[Session], write: Callable[[Session, B], R], done: Callable[[B, R, int], None],
           batch: B, retries: int) -> None:
    attempts = 0

    def attempt(session: Session) -> R:
        nonlocal attempts
        attempts += 1
        return write(session, batch)

    result = in_transaction(sessions, attempt)
    done(batch, result, retries + attempts - 1)
