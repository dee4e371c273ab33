"""Named leases in the database (`job_locks`), so a job runs once across processes and machines.

A lease has a holder and an expiry. Taking it is one atomic statement: insert
the row if there is none, else take it over only where it has expired (both
SQLite and Postgres serialise the competing UPDATEs on the row, and the loser's
WHERE no longer matches). While the job runs a heartbeat thread pushes the
expiry forward; a process that crashes stops beating, and its lease expires
`ttl` seconds later, when the next run may take it.

Times come from the database server on Postgres, so machines with skewed clocks
still agree on when a lease expired; SQLite is one machine's file anyway.

Every function here takes a session factory and commits on its own: a lease is
only a lease once other processes can see it, so each step (take, renew, look,
give back) is its own transaction, whatever the caller is doing meanwhile.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from preflab.db.engine import as_utc
from preflab.db.models import JobLock
from preflab.errors import LockHeld

log = logging.getLogger(__name__)


@dataclass
class Lease:
    name: str
    holder: str
    expires_at: datetime
    lost: bool = False  # the heartbeat found the lease taken over (it had expired)


def holder_id() -> str:
    """Who holds a lease: host, process and a random part (one process may hold several)."""
    return f"{socket.gethostname()[:80]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def db_now(session: Session) -> datetime:
    """The current time by the database server's clock on Postgres, by this machine's on SQLite."""
    if session.get_bind().dialect.name == "postgresql":
        return as_utc(session.scalar(select(func.now())))
    return datetime.now(timezone.utc)


def _insert_if_absent(session: Session, row: dict) -> None:
    if session.get_bind().dialect.name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:
        from sqlalchemy.dialects.postgresql import insert
    session.execute(insert(JobLock).values(**row).on_conflict_do_nothing(index_elements=["name"]))


def try_acquire(sessions: sessionmaker[Session], name: str, holder: str, ttl: float) -> Lease | None:
    """Take the lease `name` for `ttl` seconds if it is free or expired; None if someone holds it."""
    with sessions.begin() as session:
        now = db_now(session)
        until = now + timedelta(seconds=ttl)
        _insert_if_absent(session, {"name": name, "holder": holder, "acquired_at": now, "expires_at": until})
    with sessions.begin() as session:
        now = db_now(session)
        until = now + timedelta(seconds=ttl)
        session.execute(
            update(JobLock)
            .where(JobLock.name == name, or_(JobLock.holder == holder, JobLock.expires_at < now))
            .values(holder=holder, acquired_at=now, expires_at=until)
        )
    with sessions.begin() as session:
        row = session.get(JobLock, name)
        if row is None or row.holder != holder:
            return None
        return Lease(name, holder, as_utc(row.expires_at))


def renew(sessions: sessionmaker[Session], lease: Lease, ttl: float) -> bool:
    """Push the expiry of a lease we hold `ttl` seconds ahead; False if it is no longer ours."""
    with sessions.begin() as session:
        until = db_now(session) + timedelta(seconds=ttl)
        renewed = session.execute(
            update(JobLock).where(JobLock.name == lease.name, JobLock.holder == lease.holder).values(expires_at=until)
        ).rowcount
    if renewed:
        lease.expires_at = until
    return bool(renewed)


def release(sessions: sessionmaker[Session], lease: Lease) -> None:
    """Give the lease back (only if it is still ours)."""
    with sessions.begin() as session:
        session.execute(delete(JobLock).where(JobLock.name == lease.name, JobLock.holder == lease.holder))


def describe(sessions: sessionmaker[Session], name: str) -> dict | None:
    """The lease's holder and times, or None when nobody holds it."""
    with sessions.begin() as session:
        row = session.get(JobLock, name)
        if row is None:
            return None
        now = db_now(session)
        expires = as_utc(row.expires_at)
        return {
            "name": name,
            "holder": row.holder,
            "acquired_at": as_utc(row.acquired_at),
            "expires_at": expires,
            "expired": expires < now,
        }


class _Heartbeat(threading.Thread):
    def __init__(self, sessions: sessionmaker[Session], lease: Lease, ttl: float):
        super().__init__(name=f"lease-{lease.name}", daemon=True)
        self.sessions, self.lease, self.ttl = sessions, lease, ttl
        self.stopped = threading.Event()

    def run(self) -> None:
        # Three beats per TTL: a lease survives two failed renewals (a database restart, say).
        while not self.stopped.wait(self.ttl / 3):
            try:
                if not renew(self.sessions, self.lease, self.ttl):
                    self.lease.lost = True
                    log.warning("lost the %s lease: it expired and another run took it", self.lease.name)
                    return
            except Exception as exc:  # a transient database error: try again at the next beat
                log.warning("could not renew the %s lease: %s", self.lease.name, exc)


@contextmanager
def hold(sessions: sessionmaker[Session], name: str, ttl: float = 600.0, holder: str | None = None) -> Iterator[Lease]:
    """Hold the lease `name` for the duration of the block, renewing it in the background.

    Raises:
        LockHeld: another live process holds it.
    """
    if ttl <= 0:
        raise ValueError("ttl must be positive")
    lease = try_acquire(sessions, name, holder or holder_id(), ttl)
    if lease is None:
        info = describe(sessions, name)
        who = f"{info['holder']}, until {info['expires_at']:%Y-%m-%d %H:%M:%S} UTC" if info else "just released"
        raise LockHeld(f"another run holds the {name} lock ({who})")
    beat = _Heartbeat(sessions, lease, ttl)
    beat.start()
    try:
        yield lease
    finally:
        beat.stopped.set()
        beat.join()
        release(sessions, lease)
