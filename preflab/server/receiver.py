"""Group commit of webhook deliveries: one thread per server process owns every delivery write.

A request hands its body to `Receiver.receive` and awaits the answer without blocking the
event loop. The receiver thread takes everything queued (up to `GROUP`), stores it in ONE
transaction (`webhooks.receive_many`), commits, then answers each request: a delivery is
acknowledged only once its raw record is committed. If that transaction fails, every
request of the group gets the error (the server answers 500), and none was stored.

Why: with one short transaction per request, 20 request threads and the parser waited on
SQLite's one write lock in its busy handler (sleeping up to 100 ms between tries, a newer
writer taking the lock in between): p99 2.1-2.3 s at saturation (bench/bench_serve.py).
One writer queueing in the process, and one commit per group, removes both.

`Gate`: on SQLite the parser writes only while no delivery waits to be stored, a small
batch at a time (`workers.DeliveryWorker`), so a delivery waits at most one such batch; and
while deliveries keep coming (none quiet for `QUIET`), at most half the time (`SHARE`):
a parser always running held the GIL against the event loop (p99 ~200 ms at saturation).
Deliveries stored faster than they are parsed wait `pending`, and are parsed once the flood ebbs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from contextlib import contextmanager

from sqlalchemy.orm import Session, sessionmaker

from preflab.db.transactions import in_transaction
from preflab.errors import one_line

log = logging.getLogger("preflab.server")
GROUP = 200  # deliveries stored per transaction, at most
QUIET = 0.01  # the parser goes when no delivery came for this long (s), or
SHARE = 1.0  # when it has waited as long as its last batch took: under a flood, half the time


class Gate:
    """The process's delivery writes on one lock, the receiver first: the parser goes only when nothing waits."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = False
        self._queued = 0  # deliveries handed over and not yet stored
        self._last_arrival = self._next_parse = 0.0
        self._parse_start = 0.0

    def arrived(self) -> None:
        with self._cond:
            self._queued += 1
            self._last_arrival = time.monotonic()

    @contextmanager
    def receiver(self, taken: int):
        with self._cond:
            while self._busy:
                self._cond.wait()
            self._busy = True
        try:
            yield
        finally:
            with self._cond:
                self._busy = False
                self._queued -= taken
                self._cond.notify_all()

    @contextmanager
    def parser(self, stopping: threading.Event):
        """Held while no delivery waits to be stored (checked every 50 ms; stopping, it only waits its turn)."""
        self._take(stopping)
        try:
            yield
        finally:
            self._give()

    @contextmanager
    def released(self, stopping: threading.Event):
        """The parser lets go while it waits on something else (Label Studio); it has written nothing yet."""
        self._give()
        try:
            yield
        finally:
            self._take(stopping)

    def _take(self, stopping: threading.Event) -> None:
        with self._cond:
            while self._busy or (not stopping.is_set() and self._waits()):
                self._cond.wait(0.01)
            self._busy = True
            self._parse_start = time.monotonic()

    def _waits(self) -> bool:
        now = time.monotonic()
        return bool(self._queued) or (now - self._last_arrival < QUIET and now < self._next_parse)

    def _give(self) -> None:
        with self._cond:
            now = time.monotonic()
            self._next_parse = now + SHARE * (now - self._parse_start)
            self._busy = False
            self._cond.notify_all()


class Receiver(threading.Thread):
    """Stores the deliveries handed to `receive`, a group per transaction, in the order they came."""

    def __init__(self, sessions: sessionmaker[Session], gate: Gate | None = None, group: int = GROUP):
        super().__init__(name="preflab-receiver", daemon=True)
        self.sessions, self.gate, self.group = sessions, gate or Gate(), group
        self._queue: deque = deque()
        self._ready = threading.Condition()
        self._stopping = False
        self._start_lock = threading.Lock()
        self.groups = self.stored = 0

    async def receive(self, body: bytes, origin: str | None):
        """The body's `webhooks.Delivery`, once committed; raises what the group's transaction raised."""
        self.ensure_started()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._ready:
            if self._stopping:
                raise RuntimeError("the server is stopping")
            self._queue.append((body, origin, loop, future))
            self.gate.arrived()
            self._ready.notify()
        return await future

    def ensure_started(self) -> None:
        with self._start_lock:
            if not self.is_alive() and not self._stopping:
                self.start()

    def stop(self, wait: float = 15.0) -> None:
        """Store what was handed over already, then end."""
        with self._ready:
            self._stopping = True
            self._ready.notify()
        if self.is_alive():
            self.join(wait)

    def run(self) -> None:
        while True:
            with self._ready:
                while not self._queue and not self._stopping:
                    self._ready.wait()
                if not self._queue:
                    return
                taken = [self._queue.popleft() for _ in range(min(len(self._queue), self.group))]
            self._store(taken)

    def _store(self, taken: list) -> None:
        from preflab.labelling.studio.webhooks import receive_many

        pairs = [(body, origin) for body, origin, _, _ in taken]
        try:
            with self.gate.receiver(len(taken)):
                deliveries = in_transaction(self.sessions, lambda session: receive_many(session, pairs))
        except Exception as exc:  # nothing of the group was committed: every request hears it
            log.error("storing %d deliveries failed: %s", len(taken), one_line(exc))
            for _, _, loop, future in taken:
                _answer(loop, future, None, exc)
            return
        self.groups += 1
        self.stored += len(taken)
        for (_, _, loop, future), delivery in zip(taken, deliveries):
            _answer(loop, future, delivery, None)


def _answer(loop: asyncio.AbstractEventLoop, future: asyncio.Future, value, error: Exception | None) -> None:
    def settle() -> None:
        if future.done():  # the request was cancelled (the client went away): its delivery is stored all the same
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    with contextlib.suppress(RuntimeError):  # its event loop is closed: nobody waits for this answer any more
        loop.call_soon_threadsafe(settle)
