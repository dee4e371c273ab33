"""The server's background workers: threads, never the request path.

- `deliveries`: parses stored webhook deliveries (`webhook_apply.apply_pending`), each batch in
  its own transaction, when a request wakes it and every couple of seconds (deliveries a
  sibling process stored, or ones left pending by a crash, are found that way too); on
  SQLite after the receiver (`receiver.Gate`): storing a delivery comes first;
- `sync`: one incremental `ls sync` of every project at start, then every `--sync-every`;
- `model` (`retraining.py`): the model version served, retraining on arrival.

Each worker runs its step, then sleeps until woken or its interval passes. A step that
fails is logged in one line and tried again later, waiting longer each time (Label Studio
down must not become a busy loop). Stopping lets the step under way finish: a delivery
batch is one short transaction, so a graceful shutdown loses nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from sqlalchemy.orm import Session, sessionmaker

from preflab.db.transactions import in_transaction
from preflab.errors import LockHeld, PreflabError, one_line
from preflab.server.receiver import Gate
from preflab.server.studio import Studio

log = logging.getLogger("preflab.server")
DELIVERY_POLL = 2.0  # seconds between looks for deliveries no request announced
# Deliveries parsed per transaction. SQLite has one writer: small batches, each only while no delivery waits to be
# stored (`receiver.Gate`), so a delivery waits at most one batch (~10-20 ms). Postgres: no wait for the parser.
DELIVERY_BATCH = {"sqlite": 2, "postgresql": 50}
MAX_BACKOFF = 60.0
SYNC_LOCK, SYNC_LOCK_TTL = "serve-sync", 300.0


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class Activity:
    """What one worker last did, for /health (updated by its thread, read by requests)."""

    runs: int = 0
    last_at: str | None = None
    last_error: str | None = None
    last_error_at: str | None = None
    detail: dict = field(default_factory=dict)

    def ok(self, **detail) -> None:
        self.runs += 1
        self.last_at, self.last_error = _now(), None
        self.detail.update(detail)

    def failed(self, exc: BaseException) -> None:
        self.last_error, self.last_error_at = one_line(exc), _now()

    def as_dict(self) -> dict:
        return {
            "runs": self.runs,
            "last_at": self.last_at,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at,
            **self.detail,
        }


class Loop(threading.Thread):
    """Run `step()` now, then each time `wake()` is called or `every` seconds pass, until `stop()`.

    `step` may return the seconds to wait before the next run instead of `every`.
    """

    def __init__(
        self, name: str, step: Callable[[], float | None], every: float | None, activity: Activity | None = None
    ):
        super().__init__(name=f"preflab-{name}", daemon=True)
        self.step, self.every = step, every
        self.activity = activity or Activity()
        self.woken, self.stopping = threading.Event(), threading.Event()

    def wake(self) -> None:
        self.woken.set()

    def stop(self) -> None:
        self.stopping.set()
        self.woken.set()

    def run(self) -> None:
        failures = 0
        while not self.stopping.is_set():
            try:
                wait = self.step()
                failures = 0
            except Exception as exc:  # one line, then again later: a worker never dies of one failure
                failures += 1
                self.activity.failed(exc)
                backoff = min(MAX_BACKOFF, 2.0 * 2 ** min(failures, 5))
                log.warning("%s failed (trying again in %.0f s): %s", self.name, backoff, one_line(exc))
                self.stopping.wait(backoff)  # a wake does not cut it short: no retry storm while deliveries flow
                continue
            if self.stopping.is_set():
                return
            self.woken.wait(wait if wait is not None else self.every)  # None: until woken
            self.woken.clear()


class DeliveryWorker:
    """Parses pending deliveries, oldest first, a batch per transaction, until none is left."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        studio: Studio,
        after: Callable[[], None] = lambda: None,
        gate: Gate | None = None,
    ):
        self.sessions, self.studio, self.after = sessions, studio, after
        with sessions() as session:
            dialect = session.get_bind().dialect.name
        self.batch = DELIVERY_BATCH.get(dialect, 25)
        self.gate = gate if dialect == "sqlite" else None  # Postgres: row locks, no wait for the receiver
        self.parsed = 0
        self.loop = Loop("deliveries", self.step, DELIVERY_POLL)

    def _batch(self, session: Session):
        from preflab.labelling.studio.webhook_apply import apply_pending

        return apply_pending(session, self.studio.base_url, self._users, limit=self.batch)

    def _users(self) -> dict[int, str]:
        if self.gate is None:
            return self.studio.users()
        with self.gate.released(self.loop.stopping):  # called before anything is written: deliveries go on
            return self.studio.users()

    def step(self) -> None:
        from preflab.labelling.studio.webhooks import pending_count

        parsed = 0
        while not self.loop.stopping.is_set():
            if not in_transaction(self.sessions, pending_count):
                break
            if self.gate is None:
                summary = in_transaction(self.sessions, self._batch)
            else:
                with self.gate.parser(self.loop.stopping):
                    summary = in_transaction(self.sessions, self._batch)
            parsed += summary.deliveries
            log.info("parsed %s", summary.line())
            if summary.deliveries == 0:  # nothing could be taken (another process holds them): look again later
                break
        if parsed:
            self.parsed += parsed
            self.after()
        self.loop.activity.ok(parsed=self.parsed)


class SyncWorker:
    """The incremental `ls sync` of every project preflab knows on the server, one at a time."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        studio: Studio,
        every: float | None,
        after: Callable[[], None] = lambda: None,
    ):
        self.sessions, self.studio, self.after = sessions, studio, after
        self.loop = Loop("sync", self.step, every)

    def step(self) -> None:
        from preflab.db.locks import hold
        from preflab.labelling.studio.sync import sync_project

        client = self.studio.client()
        with self.sessions.begin() as session:
            projects = self.studio.project_ids(session)
        synced, failed, start = {}, {}, time.monotonic()
        try:
            # One sync at a time across the server's processes (and replicas): the others skip this round.
            with hold(self.sessions, SYNC_LOCK, SYNC_LOCK_TTL):
                for project_id in projects:
                    if self.loop.stopping.is_set():
                        break
                    try:
                        _, summary = sync_project(self.sessions, client, project_id)
                    except PreflabError as exc:  # one project gone or refused: the others still sync
                        failed[project_id] = one_line(exc)
                        log.warning("sync of project %d failed: %s", project_id, failed[project_id])
                        continue
                    synced[project_id] = summary.new + summary.updated + summary.deleted
                    log.info("synced project %d: %s", project_id, summary.line())
        except LockHeld:
            log.info("sync skipped: another process is syncing")
        self.loop.activity.ok(
            projects=sorted(synced),
            changed=sum(synced.values()),
            failed=failed,
            seconds=round(time.monotonic() - start, 1),
        )
        if any(synced.values()):
            self.after()
