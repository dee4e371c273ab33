"""`GET /health`: up or not, for Label Studio (which allows it one second) and for operators: the
database, the model version served, the last delivery, and each worker's last run and last error (a failed
retrain says so while the current version keeps serving)."""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from preflab.db.transactions import in_transaction
from preflab.errors import PreflabError, one_line
from preflab.server.deps import ServicesDep
from preflab.server.services import Services

log = logging.getLogger("preflab.server")
HEALTH_DB_TIMEOUT = 0.8  # Label Studio gives /health one second
router = APIRouter()


@router.get("/health")
async def health(services: ServicesDep):
    return await health_answer(services)


async def health_answer(services: Services) -> JSONResponse:
    from preflab.labelling.studio.webhooks import last_delivery_at, pending_count

    def look(session: Session) -> dict:
        session.execute(text("SELECT 1"))
        last = last_delivery_at(session)
        found = {
            "pending": pending_count(session),
            "last_delivery_at": last.isoformat(timespec="seconds") if last else None,
        }
        try:
            found["model_version"] = services.model.version(session)
            served = services.scorer.resolve(session)
            found["serving"] = served.describe() if served is not None else None
        except PreflabError as exc:  # the judge cannot be named (deleted since start, say): no model to serve
            found["model_error"] = one_line(exc)
        return found

    answer = {
        "status": "UP",
        "model_class": "preflab",
        "started_at": services.started_at,
        "label_studio": services.studio.base_url,
    }
    deliveries: dict = {}
    try:
        found = await asyncio.wait_for(
            run_in_threadpool(in_transaction, services.sessions, look, attempts=1), HEALTH_DB_TIMEOUT
        )
    except asyncio.TimeoutError:
        answer |= {"status": "DOWN", "database": f"no answer within {HEALTH_DB_TIMEOUT:g} s"}
    except Exception as exc:
        log.warning("health: the database did not answer: %s", one_line(exc))
        answer |= {"status": "DOWN", "database": "unreachable"}
    else:
        answer |= {"database": "ok", "model_version": found.get("model_version"), "serving": found.get("serving")}
        if "model_error" in found:
            answer |= {"status": "DOWN", "error": found["model_error"]}
        deliveries = {"pending": found["pending"], "last_delivery_at": found["last_delivery_at"]}
    model = services.model
    receiver = services.receiver
    answer |= {
        "deliveries": deliveries
        | {"parser": services.deliveries.loop.activity.as_dict(), "stored": receiver.stored, "groups": receiver.groups},
        "sync": services.sync.loop.activity.as_dict(),
        "model": model.loop.activity.as_dict(),
        **model.health(),
        "predictions": services.scorer.health() | {"budget_s": services.config.predict_seconds},
    }
    return JSONResponse(answer, status_code=200 if answer["status"] == "UP" else 503)
