"""Receiving Label Studio webhooks: each delivery stored as received, before `webhook_apply` parses it.

Label Studio 1.23 posts a webhook once, inside the annotator's own request, waits
`WEBHOOK_TIMEOUT` (1 s) and never retries (its `webhooks/utils.py`). So `receive`
only stores the body, keyed by the hash of its bytes (a replay is the same record),
and checks that it is a JSON object naming an annotation event; a delivery waits
as `pending` for `webhook_apply.apply_pending`, and one stored before a crash is applied after it.

What Label Studio sends (`webhooks/models.py` `WebhookAction.ACTIONS`,
`webhooks/serializers_for_hooks.py`), always with `action`:

- ANNOTATION_CREATED, ANNOTATION_UPDATED: `annotation` (every field of the model:
  `completed_by`, `task` and `project` are ids), `task` (every field, `data`
  included, no annotations) and `project` (every field);
- ANNOTATIONS_CREATED (only the Data Manager's "predictions to annotations"): the
  same keys, with `annotation` and `task` lists;
- ANNOTATIONS_DELETED: `annotations: [{"id": …}]` and `project` (with its
  batching feature flag off, `action` alone when nothing was deleted). Converting
  an annotation to a draft deletes it and sends nothing (the ids are read after the
  deletion): only `ls sync` sees that one go.

The project object Label Studio sends holds its invite `token` and the
`task_data_login`/`task_data_password` of its storage: these are blanked before
the delivery is stored (its hash stays that of the bytes received).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session

from preflab.console import plural
from preflab.db.engine import as_utc
from preflab.db.models import RawRecord, RawStatus
from preflab.db.store import payload_hash, quarantine, store_raw
from preflab.labelling.studio.received import shown_id

log = logging.getLogger(__name__)

EVENTS = frozenset({"ANNOTATION_CREATED", "ANNOTATIONS_CREATED", "ANNOTATION_UPDATED", "ANNOTATIONS_DELETED"})
WEBHOOK_SOURCE = "label-studio:webhook"  # raw_records.source of a delivery
# Whether a raw record is a delivery. Written into the SQL as a literal, so that both databases use the index
# partial to deliveries (db.models).
IS_DELIVERY = RawRecord.source == bindparam("webhook_source", WEBHOOK_SOURCE, literal_execute=True)
PROJECT_SECRETS = ("token", "task_data_login", "task_data_password")
BLANKED = "[not stored]"


@dataclass(frozen=True)
class Delivery:
    """One body received: its raw record, why it was refused (None: pending or applied), whether it is new."""

    raw_id: int
    error: str | None
    new: bool


def _checked(body: bytes) -> tuple[Any, str | None]:
    """The body decoded (None if it is not JSON), and why it is refused (None: it names an annotation event)."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return None, f"the body is not JSON ({exc})"
    if not isinstance(value, dict):
        return value, f"the body is a JSON {type(value).__name__}, not an object"
    action = value.get("action")
    if not isinstance(action, str) or action not in EVENTS:
        said = "no action" if action is None else f"action {shown_id(action)}"
        return value, f"the body names {said}, not one of {', '.join(sorted(EVENTS))}"
    return value, None


def _locator(value: Any) -> str:
    if not isinstance(value, dict) or not isinstance(value.get("action"), str):
        return "webhook delivery"
    action, project = value["action"], value.get("project")
    action = action if action in EVENTS else shown_id(action)  # escaped: it may hold a NUL
    where = f" in project {shown_id(project.get('id'))}" if isinstance(project, dict) else ""
    one = value.get("annotation")
    if isinstance(one, dict):
        return f"{action} annotation {shown_id(one.get('id'))} of task {shown_id(one.get('task'))}{where}"
    many = value.get("annotations") if isinstance(value.get("annotations"), list) else one
    return f"{action} {plural(len(many), 'annotation')}{where}" if isinstance(many, list) else f"{action}{where}"


def _stored_form(body: bytes, value: Any) -> str | bytes:
    """What is kept of a body: its text, with the project's secrets blanked; bytes where text cannot hold it."""
    project = value.get("project") if isinstance(value, dict) else None
    if isinstance(project, dict) and any(project.get(k) for k in PROJECT_SECRETS):
        blanked = {k: BLANKED for k in PROJECT_SECRETS if project.get(k)}
        return orjson.dumps({**value, "project": {**project, **blanked}}).decode()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return body
    return body if "\x00" in text else text  # a NUL: a database text column cannot hold it


def receive(session: Session, body: bytes, *, origin: str | None = None) -> Delivery:
    """Store one webhook body as received, before it is parsed; returns its raw record.

    A body that is not a JSON object naming an annotation event (`EVENTS`) is
    stored quarantined with the reason (`error`: the server answers 400);
    otherwise it is stored `pending` for `webhook_apply.apply_pending`. The same bytes again
    (a replay) return the same record, `new` False, and change nothing.

    Args:
        origin: who sent it (the client's address), kept on the raw record.
    """
    return receive_many(session, [(body, origin)])[0]


def receive_many(session: Session, bodies: Sequence[tuple[bytes, str | None]]) -> list[Delivery]:
    """`receive` for many (body, origin) pairs in the caller's transaction: one Delivery each, in order.

    The server's group commit. The same bytes twice in `bodies` are one record, `new` for the first only.
    """
    checked = [(body, origin, payload_hash(body), *_checked(body)) for body, origin in bodies]
    by_origin: dict[str | None, list[tuple[str, str | bytes, str]]] = {}
    for body, origin, digest, value, _ in checked:
        by_origin.setdefault(origin, []).append((_locator(value), _stored_form(body, value), digest))
    ids: dict[str, int] = {}
    fresh: set[str] = set()
    for origin, payloads in by_origin.items():
        raw = store_raw(session, WEBHOOK_SOURCE, origin, payloads)
        ids.update((digest, raw_id) for digest, (raw_id, _) in raw.items())
        fresh |= raw.new
    out, reasons, pending = [], {}, []
    for _, _, digest, _, error in checked:
        new = digest in fresh
        fresh.discard(digest)
        if new and error:
            reasons[ids[digest]] = error
            log.warning("webhook delivery #%d quarantined: %s", ids[digest], error)
        elif new:
            pending.append({"id": ids[digest], "status": RawStatus.pending.value})
        out.append(Delivery(ids[digest], error, new))
    quarantine(session, reasons)
    if pending:
        session.execute(update(RawRecord), pending)
    return out


def pending_count(session: Session) -> int:
    """How many deliveries are stored and not parsed yet."""
    return session.scalar(
        select(func.count()).select_from(RawRecord).where(IS_DELIVERY, RawRecord.status == RawStatus.pending.value)
    )


def last_delivery_at(session: Session) -> datetime | None:
    """When the newest delivery was received (whatever became of it); None before the first."""
    # The newest of each status, each one probe of the deliveries' (status, id) index.
    newest = [
        session.scalar(select(func.max(RawRecord.id)).where(IS_DELIVERY, RawRecord.status == status.value))
        for status in RawStatus
    ]
    newest = [rid for rid in newest if rid is not None]
    if not newest:
        return None
    return as_utc(session.scalar(select(RawRecord.received_at).where(RawRecord.id == max(newest))))
