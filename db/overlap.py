"""Batches written one transaction each, every COMMIT finishing on a second thread while the next batch is read.

An import's COMMIT is long and holds no Python lock: SQLite writes the batch's pages to its log (a third of
a `preflab import dataset` run on SQLite, bench/README.md, issue 30), Postgres waits for its server. Reading
and parsing the next batch is Python's own work. `commit_behind` runs the two side by side: it writes a
batch in a transaction (on this thread), hands the COMMIT to a committing thread, and only then asks the
batches' iterator for the next one, whose reading overlaps the COMMIT. The next batch's writes wait for
that COMMIT, so the transactions still run one after another, in order; at most two batches are held.

On SQLite most of a big COMMIT is the checkpoint it sets off (copying the log into the database file:
0.8 of 0.95 s over 100,000 oasst2 rows, bench/README.md, issue 30). While batches come faster than that
(read ahead), the first COMMITs only write the log and a third thread checkpoints on a connection of its
own (PASSIVE: it takes no lock a writer needs), beside the next batch's writes (`_Committer`).

On Postgres the batches are also read on a thread of their own (`read_ahead`) while this one waits for the
server: the server's share of an import is as big as Python's (UltraFeedback: 7 s of its CPU beside 8.5 s
here, bench/README.md, issue 30), and a wait gives the Python lock up in one piece. Not on SQLite: its
`executemany` gives the lock up and takes it back for every row, and beside a busy thread each row then
waits up to the 5 ms switch interval.

`aside` runs a first read that only a later step needs (the tree ids of `import dataset`'s oasst2 file)
in a forked child process, so that the first batches are read and parsed here meanwhile.

A transaction that lost a race (`transactions.retry_reason`) at a write or at COMMIT is run again as a whole by
`transactions.in_transaction`, synchronously, as every checkpointing job's is: the writes must be idempotent.
An error that cannot be retried stops the run once the COMMIT in flight has finished, so every batch
before it is committed whole and none after it is begun.
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from preflab.db.engine import AUTOCHECKPOINT_KEY
from preflab.db.transactions import in_transaction, retry_reason

B = TypeVar("B")
R = TypeVar("R")
LOG_PAGES = 16384  # 64 MB of 4 kB pages: past this each COMMIT checkpoints in place again


def defer_checkpoint(session: Session) -> bool:
    """SQLite: the COMMIT of `session`'s transaction writes the log and leaves its checkpoint to `checkpoint`.

    A COMMIT that fills the log past 1,000 pages copies it into the database file before it returns
    (SQLite's automatic checkpoint). Only this connection's setting changes, and it is set back when the
    connection returns to the pool (`engine._restore_autocheckpoint`). Returns False on Postgres.
    """
    connection = session.connection()
    if connection.dialect.name != "sqlite":
        return False
    if AUTOCHECKPOINT_KEY not in connection.info:
        connection.info[AUTOCHECKPOINT_KEY] = connection.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar()
        connection.exec_driver_sql("PRAGMA wal_autocheckpoint=0")
    return True


def checkpoint(engine: Engine) -> int:
    """SQLite: copy the log's committed pages into the database file, on a connection of its own.

    PASSIVE: it waits for no lock, so a writer goes on beside it; what a reader still needs stays in the log.
    Returns how many pages the log holds.
    """
    with engine.connect() as connection:
        _busy, pages, _copied = connection.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").one()
    return pages


class _Committer:
    """Commits on a thread of its own; on SQLite the first COMMITs' checkpoints on a third.

    Checkpointing beside the writes pays only while the batches come faster than a COMMIT, as when an
    import has read batches ahead (`import dataset`'s oasst2 file, while its tree ids were read): then each
    COMMIT was waited for at once. Afterwards the next batch's reading hides the COMMIT, checkpoint and all,
    and a checkpoint beside the writes only slowed them (UltraFeedback: 5-10 %, bench/README.md, issue 30).
    The log also only starts again from its beginning when a write begins with the whole log copied, which
    seldom happens then: it grew to 268 MB over the bench's UltraFeedback import. So once the last
    checkpoint found LOG_PAGES in the log, this COMMIT and all after it checkpoint in place, as SQLite does
    by itself. Each COMMIT first waits for the checkpoint before it (long done, as a rule), so which
    commits checkpoint in place does not depend on timing.
    """

    def __init__(self) -> None:
        self.commits = ThreadPoolExecutor(1, thread_name_prefix="preflab-commit")
        self.checkpoints = ThreadPoolExecutor(1, thread_name_prefix="preflab-checkpoint")
        self.log_pages = 0  # in the log after the last checkpoint
        self.pending: Future[None] | None = None
        self.deferring = True

    def submit(self, session: Session) -> Future[None]:
        return self.commits.submit(self._commit, session)

    def _commit(self, session: Session) -> None:
        try:
            if self.pending is not None:
                self.pending.result()
            self.deferring = self.deferring and self.log_pages < LOG_PAGES and defer_checkpoint(session)
            session.commit()
            if self.deferring:
                self.pending = self.checkpoints.submit(self._checkpoint, session.get_bind())
        finally:
            session.close()

    def _checkpoint(self, engine) -> None:
        try:
            self.log_pages = checkpoint(engine)
        except DBAPIError:  # not known: the next COMMIT checkpoints in place
            self.log_pages = LOG_PAGES

    def __enter__(self) -> _Committer:
        return self

    def __exit__(self, *_exc) -> None:
        self.commits.shutdown()  # its last COMMIT may hand a checkpoint on
        self.checkpoints.shutdown()


def commit_behind(
    sessions: sessionmaker[Session],
    batches: Iterable[B],
    write: Callable[[Session, B], R],
    done: Callable[[B, R, int], None],
) -> None:
    """`write(session, batch)` for each batch in its own transaction, committed behind the next batch's reading.

    `done(batch, result, retries)` is called on this thread once the batch's transaction has committed,
    in order (`retries`: how many times it was run again after losing a race).
    """
    with sessions() as probe:
        beside = probe.get_bind().dialect.name == "postgresql"
    reading = read_ahead(iter(batches)) if beside else batches
    try:
        _commit_each(sessions, reading, write, done)
    finally:
        if beside:
            reading.close()  # stopped early: the reading thread stops too


def _commit_each(
    sessions: sessionmaker[Session],
    batches: Iterable[B],
    write: Callable[[Session, B], R],
    done: Callable[[B, R, int], None],
) -> None:
    with _Committer() as committer:
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
                behind = (committer.submit(session), batch, result)
        finally:
            if behind is not None:  # the last batch, or an error while reading: the batch before it is kept whole
                _settle(sessions, write, done, *behind)


def _settle(
    sessions: sessionmaker[Session],
    write: Callable[[Session, B], R],
    done: Callable[[B, R, int], None],
    future: Future[None],
    batch: B,
    result: R,
) -> None:
    try:
        future.result()
    except DBAPIError as exc:
        if retry_reason(exc) is None:
            raise
        _again(sessions, write, done, batch, 1)  # unknown whether it committed: the writes are idempotent
        return
    done(batch, result, 0)


def _again(
    sessions: sessionmaker[Session],
    write: Callable[[Session, B], R],
    done: Callable[[B, R, int], None],
    batch: B,
    retries: int,
) -> None:
    attempts = 0

    def attempt(session: Session) -> R:
        nonlocal attempts
        attempts += 1
        return write(session, batch)

    result = in_transaction(sessions, attempt)
    done(batch, result, retries + attempts - 1)


def read_ahead(items: Iterator[B]) -> Iterator[B]:
    """The items, each read on a thread while the caller works on the one before (None ends them).

    The first is read on the caller's thread: what it waits for (`import dataset`'s first read, in a child
    process that ignores Ctrl-C) is then waited for where Ctrl-C stops it.
    """
    item = next(items, None)
    if item is None:
        return
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="preflab-read-ahead")
    try:
        while item is not None:
            pending = pool.submit(next, items, None)
            yield item
            item = None  # hold no item past its use
            item = pending.result()
    finally:
        # A caller that stopped early: the item being read is read whole, then the items are closed (with the
        # reader idle; a Ctrl-C during that wait leaves them to it, and it stops after that item).
        pool.shutdown(wait=True)
        close = getattr(items, "close", None)
        if close is not None:
            close()


class Aside:
    """`fn(*args)` running in a forked child process; its result (or exception) comes back pickled."""

    def __init__(self, fn: Callable[..., R], args: tuple[Any, ...]):
        context = multiprocessing.get_context("fork")
        self._receive, send = context.Pipe(duplex=False)
        self._process = context.Process(target=_send_result, args=(send, fn, args), daemon=True, name="preflab-aside")
        self._process.start()  # multiprocessing flushes stdout and stderr first, so nothing is written twice
        send.close()
        self._fn, self._args = fn, args
        self._outcome: tuple[bool, Any] | None = None

    def done(self) -> bool:
        """Whether the result is ready (result() would not wait)."""
        return self._outcome is not None or self._receive.poll()

    def result(self) -> R:
        """The child's result, waiting for it; its exception raised here. A child that died is run here again.

        As a Future's, it may be asked again: the same result, or the same exception.
        """
        if self._outcome is None:
            try:
                self._outcome = self._receive.recv()
            except EOFError:  # killed (out of memory, a signal): nothing came back
                try:
                    self._outcome = (True, self._fn(*self._args))
                except Exception as exc:
                    self._outcome = (False, exc)
        ok, value = self._outcome
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """Stop the child if it is still running (the caller stopped before it needed the result)."""
        if self._process.is_alive():
            self._process.terminate()
        self._process.join()
        self._receive.close()


def _send_result(send, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the parent, which stops this child (no traceback)
    try:
        outcome = (True, fn(*args))
    except Exception as exc:
        outcome = (False, exc)
    send.send(outcome)
    send.close()


@contextmanager
def aside(fn: Callable[..., R], *args: Any, fork: bool = True) -> Iterator[Aside | Future]:
    """`fn(*args)` in a forked child process while the caller goes on; `.done()` and `.result()` as a Future's.

    With `fork` False, or where processes cannot fork (not Linux), it runs here and now. The child
    shares nothing with this process after the fork: `fn` must only read (a file) and return a picklable
    value. On leaving, a child still running is stopped.
    """
    if not fork or not sys.platform.startswith("linux"):
        here: Future[R] = Future()
        here.set_result(fn(*args))
        yield here
        return
    child = Aside(fn, args)
    try:
        yield child
    finally:
        child.close()
