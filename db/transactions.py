"""Transactions that may be retried.

`in_transaction` is how a job that checkpoints runs each of its transactions:
one that lost a race with another writer (a serialization failure, a deadlock, a
unique key the other got first) or its connection is rolled back and run again,
a bounded number of times.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from preflab.errors import DatabaseError

log = logging.getLogger(__name__)
ATTEMPTS = 6  # tries of one transaction before `in_transaction` gives up
T = TypeVar("T")

_CONFLICTS = {
    "40001": "a serialization failure",
    "40P01": "a deadlock",
    "23505": "another writer added the same row first",
}


def retry_reason(exc: DBAPIError) -> str | None:
    """Why a transaction that failed with `exc` may be run again as a whole; None: it may not."""
    orig = exc.orig
    code = getattr(orig, "sqlstate", None)
    if code in _CONFLICTS:
        return _CONFLICTS[code]
    if exc.connection_invalidated or (code or "").startswith("08") or code in ("57P01", "57P02", "57P03"):
        return "the connection to the database was lost"
    if isinstance(exc, OperationalError) and hasattr(orig, "sqlstate") and code is None:
        return "the database server could not be reached"  # psycopg: no answer from a server at all
    message = str(orig)
    if message.startswith("database is locked"):  # SQLite: another process held the write lock too long
        return "the database was locked by another writer"
    if message.startswith("UNIQUE constraint failed"):  # SQLite's unique violation
        return _CONFLICTS["23505"]
    return None


def in_transaction(
    sessions: sessionmaker[Session],
    work: Callable[[Session], T],
    *,
    attempts: int = ATTEMPTS,
    isolation: str | None = None,
) -> T:
    """Run `work(session)` in one transaction, running it again if it lost a race or its connection.

    `work` must be idempotent (its writes look up what exists first), so that the
    attempt that commits gives the answer a lone writer would have got. An error
    at COMMIT leaves unknown whether it committed; idempotence makes that safe too.

    Args:
        isolation: an isolation level for Postgres (e.g. "REPEATABLE READ", so a
            job reading several tables sees one snapshot); SQLite is serializable anyway.

    Raises:
        DatabaseError: every attempt failed for a retryable reason.
    """
    attempt = 0
    while True:
        attempt += 1
        try:
            with sessions.begin() as session:
                if isolation and session.get_bind().dialect.name == "postgresql":
                    session.connection(execution_options={"isolation_level": isolation})
                return work(session)
        except DBAPIError as exc:
            why = retry_reason(exc)
            if why is None:
                raise
            detail = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else type(exc.orig).__name__
            if attempt == attempts:
                raise DatabaseError(
                    f"a write to the database failed {attempts} times ({why}: {detail}); "
                    f"what was saved before it is kept: run the command again to resume"
                ) from None
            log.info("transaction attempt %d of %d failed (%s); retrying", attempt, attempts, why)
            # Back off, with jitter, so the writers that collided do not collide again at once.
            time.sleep(min(0.05 * 2**attempt, 2.0) * random.uniform(0.5, 1.5))
