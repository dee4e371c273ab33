"""Every request sent to a model server, with its answer: what was asked is never paid for twice.

A row is keyed by a hash of what was asked (`request_key`: the endpoint, the model and the
whole request body, which holds the messages, the sampling parameters and the seed derived
from the sample's index). The server's answer is stored as it was received, before it is
read, with the tokens it cost. A re-run, a run resumed after `kill -9`, or another command
that asks the same thing reads the stored answer instead of asking again
(`preflab.lm.engines`).

An answer the server refused for the item itself (a prompt over the model's context length)
is stored too, as `quarantined` with the server's reason: asking again would be refused again.

`AnswerWriter` commits answers as they arrive, from a thread of its own, in small
transactions at least every `every` seconds, so a killed run loses at most the answers of
the last moment and the requests in flight.
"""

from __future__ import annotations

import hashlib
import json
import queue
import threading
import time
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Integer, String, Text, func, select
from sqlalchemy.orm import Mapped, Session, mapped_column, sessionmaker

from preflab.db.models import Base, utcnow
from preflab.db.store import chunks, insert_ignore
from preflab.db.transactions import in_transaction

OK = "ok"
QUARANTINED = "quarantined"


class EngineRequest(Base):
    """One request to a model server and the answer it gave, as received."""

    __tablename__ = "engine_requests"

    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)  # request_key: a hash of what was asked
    endpoint: Mapped[str] = mapped_column(String(40))  # chat.completions, completions
    model: Mapped[str] = mapped_column(String(300))
    request: Mapped[dict[str, Any]] = mapped_column(JSON)  # the body sent (never the key)
    answer: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # the server's JSON answer (its error, if refused)
    status: Mapped[str] = mapped_column(String(16))  # ok | quarantined
    reason: Mapped[str | None] = mapped_column(Text)  # why quarantined: the server's own words
    tokens_in: Mapped[int] = mapped_column(Integer, default=0)
    tokens_out: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


def request_key(endpoint: str, model: str, body: dict[str, Any]) -> str:
    """SHA-256 of what was asked: the endpoint, the model and the body, keys sorted (the same ask, the same key)."""
    blob = json.dumps(
        {"endpoint": endpoint, "model": model, "body": body}, sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def request_row(
    key: str,
    endpoint: str,
    model: str,
    body: dict[str, Any],
    answer: Any,
    status: str,
    reason: str | None,
    tokens_in: int = 0,
    tokens_out: int = 0,
) -> dict[str, Any]:
    """One asked request as the row `AnswerWriter.put` takes: an answer that is no JSON object kept as its body."""
    return {
        "key": key,
        "endpoint": endpoint,
        "model": model[:300],
        "request": body,
        "answer": answer if isinstance(answer, dict) else {"body": answer},
        "status": status,
        "reason": reason,
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
    }


def stored_answers(session: Session, keys: Collection[str]) -> dict[str, EngineRequest]:
    """The stored rows among `keys`, by key."""
    found: dict[str, EngineRequest] = {}
    for part in chunks(sorted(set(keys))):
        for row in session.scalars(select(EngineRequest).where(EngineRequest.key.in_(part))):
            found[row.key] = row
    return found


def store_answers(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Insert answers; one already stored under the same key (asked twice at once) is kept as it was."""
    now = utcnow()
    insert_ignore(session, EngineRequest.__table__, [{"created_at": now, **row} for row in rows], ("key",))


def engine_usage(session: Session) -> dict[str, dict[str, int]]:
    """What the store holds from model servers, by served model: answers, quarantined asks, tokens in and out.

    Each stored answer was paid for once, whichever run or command asked for it first.
    """
    rows = session.execute(
        select(
            EngineRequest.model,
            func.count(),
            func.count().filter(EngineRequest.status == QUARANTINED),
            func.coalesce(func.sum(EngineRequest.tokens_in), 0),
            func.coalesce(func.sum(EngineRequest.tokens_out), 0),
        )
        .group_by(EngineRequest.model)
        .order_by(EngineRequest.model)
    )
    return {
        model: {
            "answers": answers,
            "quarantined": quarantined,
            "tokens_in": int(tokens_in),
            "tokens_out": int(tokens_out),
        }
        for model, answers, quarantined, tokens_in, tokens_out in rows
    }


# The engine stats that add up over runs (what a judge's or a generator's runs asked and cost, all together).
ENGINE_SUMS = (
    "requests",
    "cache_hits",
    "tokens_in",
    "tokens_out",
    "retries",
    "errors",
    "quarantined",
    "seconds",
    "cost",
)
# What the last run said about its prices, kept beside the sums.
PRICES = ("engine", "model", "price_in", "price_out", "currency")


def added_stats(total: dict[str, Any] | None, stats: dict[str, Any], replace: bool = False) -> dict[str, Any]:
    """A run's engine stats (`EngineStats.as_dict`, with its currency) added to the sums of the runs before it
    (`replace`: `stats` are the sums already); the run's prices and currency kept beside them."""
    out = {} if replace or not total else dict(total)
    for name in ENGINE_SUMS:
        out[name] = round((out.get(name) or 0) + (stats.get(name) or 0), 6)
    out["runs"] = int(stats.get("runs") or 0) if replace else int(out.get("runs") or 0) + 1
    out.update({name: stats[name] for name in PRICES if name in stats})
    return out


def _priced(stats: dict[str, Any]) -> tuple[float, float, str] | None:
    """(price in, price out, currency) of a run on a server that was given a price; None: no price given."""
    if stats.get("engine") != "openai" or not (stats.get("price_in") or stats.get("price_out")):
        return None
    return float(stats.get("price_in") or 0), float(stats.get("price_out") or 0), stats.get("currency") or "USD"


def spend(session: Session) -> dict[str, Any]:
    """What model servers were paid, in the currency the prices were given in (`preflab stats`).

    - by served model: the stored answers' tokens (each paid once, whichever run asked first) at the price
      the runs on that model were given (`--price-in`, `--price-out`, `--currency`); no cost where no run
      gave one, nor where runs gave different prices (`prices` lists them);
    - by judge: what each judge's runs sent and cost at their own prices (a panel's is its members', so it
      is marked and left out of the totals), by the judge's name;
    - by generator: the same for `generate` on a server, by served model;
    - total: the served models' tokens and costs, one cost per currency.
    """
    from preflab.db.models import Annotator, ModelVersion

    judges = [
        (name, config["engine"])
        for name, config in session.execute(
            select(Annotator.name, Annotator.config).where(Annotator.kind == "ai").order_by(Annotator.id)
        )
        if isinstance(config, dict) and isinstance(config.get("engine"), dict)
    ]
    generators = [
        (name, metrics["engine"])
        for name, metrics in session.execute(select(ModelVersion.name, ModelVersion.metrics).order_by(ModelVersion.id))
        if isinstance(metrics, dict) and isinstance(metrics.get("engine"), dict)
    ]
    prices: dict[str, set[tuple[float, float, str]]] = {}
    for _, stats in judges + generators:
        price = _priced(stats)
        if price is not None:
            prices.setdefault(str(stats.get("model")), set()).add(price)
    by_model: dict[str, dict[str, Any]] = {}
    total: dict[str, Any] = {"tokens_in": 0, "tokens_out": 0, "cost": {}, "unpriced_models": 0}
    for model, used in engine_usage(session).items():
        given = sorted(prices.get(model, ()))
        row: dict[str, Any] = {**used, "cost": None, "currency": None, "price_in": None, "price_out": None}
        if len(given) == 1:
            (price_in, price_out, currency) = given[0]
            cost = round((used["tokens_in"] * price_in + used["tokens_out"] * price_out) / 1e6, 6)
            row.update(cost=cost, currency=currency, price_in=price_in, price_out=price_out)
            total["cost"][currency] = round(total["cost"].get(currency, 0.0) + cost, 6)
        else:
            total["unpriced_models"] += 1
            if given:
                row["prices"] = [{"price_in": a, "price_out": b, "currency": c} for a, b, c in given]
        total["tokens_in"] += used["tokens_in"]
        total["tokens_out"] += used["tokens_out"]
        by_model[model] = row

    def ran(name: str, stats: dict[str, Any]) -> dict[str, Any]:
        price = _priced(stats)
        return {
            "name": name,
            "model": stats.get("model"),
            "panel": stats.get("engine") == "panel",
            **{key: stats.get(key) or 0 for key in ("runs", "requests", "cache_hits", "tokens_in", "tokens_out")},
            "cost": stats.get("cost") if price is not None or stats.get("engine") == "panel" else None,
            "currency": price[2] if price is not None else stats.get("currency"),
        }

    return {
        "by_model": by_model,
        "by_judge": [ran(name, stats) for name, stats in judges],
        "by_generator": [ran(name, stats) for name, stats in generators],
        "total": total,
    }


class AnswerWriter:
    """Answers handed over from any thread, committed by one thread in small transactions.

    `put` never waits for the database. The thread commits what it holds once `every`
    seconds have passed since the oldest answer it holds arrived, or once it holds
    `size` answers. `flush` returns when everything put before it is committed, and
    raises what a failed commit raised (that answer is asked again on the next run).
    """

    def __init__(self, sessions: sessionmaker[Session], every: float = 0.5, size: int = 500):
        self.sessions, self.every, self.size = sessions, every, size
        self._queue: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self.committed = 0
        self._thread = threading.Thread(target=self._run, name="preflab-answer-writer", daemon=True)
        self._thread.start()

    def put(self, row: dict[str, Any]) -> None:
        self._raise()
        self._queue.put(("row", row))

    def flush(self) -> None:
        done = threading.Event()
        self._queue.put(("flush", done))
        done.wait()
        self._raise()

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(("stop", None))
            self._thread.join()
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _run(self) -> None:
        held: list[dict[str, Any]] = []
        oldest = 0.0
        while True:
            wait = None if not held else max(0.0, oldest + self.every - time.monotonic())
            try:
                what, value = self._queue.get(timeout=wait)
            except queue.Empty:
                what, value = "due", None
            if what == "row":
                if not held:
                    oldest = time.monotonic()
                held.append(value)
                if len(held) < self.size:
                    continue
            held = self._commit(held)
            if what == "flush":
                value.set()
            elif what == "stop":
                return

    def _commit(self, held: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if held:
            try:
                in_transaction(self.sessions, lambda session: store_answers(session, held))
                self.committed += len(held)
            except BaseException as exc:  # handed to the caller's thread by the next put or flush
                self._error = exc
        return []
