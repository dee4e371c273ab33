"""The FastAPI app of `preflab serve`: Label Studio's ML backend and the webhook receiver.

- `GET /health`: up or not, for Label Studio (which allows it one second) and for operators:
  the database, the model version served, the last delivery, and each worker's last run
  and last error (a failed retrain says so while the current version keeps serving);
- `POST /setup`: `{"model_version": …}`, cheap: Label Studio calls it before every batch;
- `POST /predict`: `{"results": [...]}`, one prediction per task, in order, within `--predict-budget`
  (`scoring.py`: what is not ranked by then is ranked in the background for the next retrieve);
- `POST /webhook`: the delivery is stored raw and acknowledged once committed; the
  receiver thread stores the deliveries that arrive together in one transaction (group
  commit, `receiver.py`); the `deliveries` worker parses them. Label Studio waits one second for the answer, inside
  the annotator's own submit, and never sends it again.

Requests are checked in this order, so a refused one stores nothing: the secret (401/403),
the size (413), then the JSON (400; a webhook body is kept in quarantine with the reason).
"""

from __future__ import annotations

import asyncio
import gc
import logging
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timezone

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from preflab.db.transactions import in_transaction
from preflab.errors import PreflabError, one_line
from preflab.server.access_log import AccessLog, note
from preflab.server.config import SECRET_HEADER, ServeConfig, webhook_secret
from preflab.server.receiver import Gate, Receiver
from preflab.server.retraining import ModelWorker
from preflab.server.scoring import Scorer, answer_predict
from preflab.server.security import Refused, check_basic, check_header, read_body
from preflab.server.studio import Studio
from preflab.server.workers import DeliveryWorker, SyncWorker
from preflab.settings import Settings

log = logging.getLogger("preflab.server")
HEALTH_DB_TIMEOUT = 0.8  # Label Studio gives /health one second
STOP_WAIT = 15.0  # seconds shutdown waits for a worker's step under way


@dataclass
class Services:
    """What the endpoints share: the store, Label Studio, the secret and the workers."""

    config: ServeConfig
    sessions: sessionmaker[Session]
    studio: Studio
    secret: str | None
    receiver: Receiver
    deliveries: DeliveryWorker
    sync: SyncWorker
    model: ModelWorker
    scorer: Scorer
    started_at: str

    def loops(self):
        return [self.deliveries.loop, self.sync.loop, self.model.loop]


def build_services(settings: Settings, config: ServeConfig) -> Services:
    """Open the store (a SQLite file is created and migrated) and make the workers; starts nothing."""
    from preflab.db.engine import open_sessions
    from preflab.errors import ConfigError

    if not settings.label_studio_url:
        raise ConfigError("no Label Studio URL: set LABEL_STUDIO_URL or pass --label-studio-url")
    sessions = open_sessions(settings.database_url)
    studio = Studio(settings.label_studio_url)
    # With nothing trained and no --judge, the default model's likelihood judge serves (`served.py`).
    options = config.judge_options() | {"default": settings.model}
    scorer = Scorer(sessions, config.judge, options)
    model = ModelWorker(
        sessions,
        studio,
        config.judge,
        options,
        settings.database_url,
        settings.model,
        config.retrain_every,
        config.retrain_config_path(),
        changed=scorer.loop.wake,
    )
    sync = SyncWorker(sessions, studio, config.sync_seconds, after=model.loop.wake)
    gate = Gate()
    receiver = Receiver(sessions, gate)
    deliveries = DeliveryWorker(sessions, studio, after=model.loop.wake, gate=gate)
    return Services(
        config,
        sessions,
        studio,
        webhook_secret(),
        receiver,
        deliveries,
        sync,
        model,
        scorer,
        datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def create_app(settings: Settings, config: ServeConfig | None = None, *, background: bool = True) -> FastAPI:
    """The app; with `background`, its workers start and stop with it (uvicorn's lifespan).

    Raises:
        ConfigError, DatabaseError: before anything listens.
    """
    services = build_services(settings, config or ServeConfig())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        services.receiver.ensure_started()  # the request path: runs with or without the background workers
        if background:
            await run_in_threadpool(warm_imports)
        # The scorer is on /predict's path too; loading the model at start (and at each new version) is background
        # work: without the workers, the model loads once something is to be ranked.
        services.scorer.eager = background
        services.scorer.loop.start()
        await run_in_threadpool(say_what_serves, services)
        if background:
            # What is loaded now lives as long as the server: out of the collector's reach, a full collection
            # pauses every thread ~10 ms instead of ~90 ms (p99 of the deliveries' answers, bench/bench_serve.py).
            gc.collect()
            gc.freeze()
            for loop in services.loops():
                loop.start()
            log.info(
                "workers started: deliveries, sync (%s), model (retrain %s)",
                f"every {services.config.sync_every}" if services.config.sync_seconds else "at start only",
                f"every {services.config.retrain_every} rankings" if services.config.retrain_every else "off",
            )
        try:
            yield
        finally:
            if background:
                await run_in_threadpool(stop_workers, services)
            await run_in_threadpool(stop_loop, services.scorer.loop)
            await run_in_threadpool(services.scorer.close)
            await run_in_threadpool(services.receiver.stop, STOP_WAIT)

    app = FastAPI(title="preflab", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.services = services
    app.add_middleware(AccessLog)

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused):
        note(request, note=exc.reason)
        return JSONResponse({"error": exc.reason}, status_code=exc.status, headers=exc.headers)

    @app.get("/health")
    async def health(request: Request):
        return await health_answer(services)

    @app.post("/setup")
    async def setup(request: Request):
        check_basic(request.headers.get("authorization"), services.secret)
        body = _json_object(await read_body(request, services.config.max_body))
        project = _project_id(body.get("project"))  # the access_token it holds is neither logged nor kept
        if project is not None:
            services.studio.seen_projects.add(project)
        try:
            version = await run_in_threadpool(in_transaction, services.sessions, services.model.version)
        except PreflabError as exc:
            raise Refused(400, one_line(exc)) from None
        note(request, project=project, model_version=version)
        return {"model_version": version}

    @app.post("/predict")
    async def predict(request: Request):
        check_basic(request.headers.get("authorization"), services.secret)
        body = _json_object(await read_body(request, services.config.max_body))
        tasks = body.get("tasks")
        if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks):
            raise Refused(400, "tasks must be a list of task objects")
        project = _project_id(body.get("project"))
        if project is None and tasks:
            project = _project_id(tasks[0].get("project"))
        if project is None:
            raise Refused(400, 'no project id (expected project: "<id>.<timestamp>")')
        services.studio.seen_projects.add(project)
        label_config = body.get("label_config") if isinstance(body.get("label_config"), str) else ""
        try:
            results, counts = await run_in_threadpool(predict_results, services, project, label_config, tasks)
        except PreflabError as exc:
            raise Refused(400, one_line(exc)) from None
        note(request, project=project, tasks=len(tasks), **counts)
        return {"results": results}

    @app.post("/webhook")
    async def webhook(request: Request):
        check_header(request.headers.get(SECRET_HEADER), services.secret)
        body = await read_body(request, services.config.max_body)
        client = request.client.host if request.client else None
        delivery = await services.receiver.receive(body, client)  # committed (else raises: 500)
        note(request, raw_id=delivery.raw_id, new=delivery.new)
        if delivery.error:
            raise Refused(400, f"{delivery.error} (kept in quarantine as raw record {delivery.raw_id})")
        services.deliveries.loop.wake()
        return {"stored": delivery.raw_id, "new": delivery.new}

    return app


def warm_imports() -> None:
    """Import what the workers import when first run (Label Studio's SDK alone takes ~0.8 s of CPU; torch and
    transformers, for the judge's model, a few seconds) before the server says it is up: done while deliveries
    arrive, it held the GIL and slowed their answers."""
    import label_studio_sdk  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from label_studio_sdk import LabelStudio  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401  (their lazy modules)

    from preflab.labelling.studio import backend, sync  # noqa: F401
    from preflab.lm import names  # noqa: F401
    from preflab.training.retrain import job, schedule  # noqa: F401


def predict_results(services: Services, project: int, label_config: str, tasks: list[dict]) -> tuple[list, dict]:
    if not tasks:
        return [], {}
    results, counts = answer_predict(
        services.scorer,
        services.sessions,
        services.studio.base_url,
        project,
        label_config,
        tasks,
        services.config.predict_seconds,
    )
    if len(results) != len(tasks):  # Label Studio would drop them all
        raise RuntimeError(f"{len(results)} predictions for {len(tasks)} tasks")
    for result in results:
        if isinstance(result, dict) and result.get("model_version"):
            services.model.served.add(result["model_version"])
    return results, counts


def say_what_serves(services: Services) -> None:
    """The start-up line that says which judge and model /predict serves (and the budget it answers in)."""
    try:
        served = in_transaction(services.sessions, services.scorer.resolve)
    except PreflabError as exc:
        log.error("/predict cannot serve: %s", one_line(exc))
        return
    budget = services.config.predict_seconds
    within = f"answering within {budget:g} s" if budget is not None else "ranking every task before answering"
    if served is None:
        log.info("/predict serves nothing: no reward model is trained (--judge names a judge)")
    else:
        log.info("/predict serves %s as model version %s, %s", served.describe(), served.name, within)


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


def stop_workers(services: Services) -> None:
    """Stop every worker; each finishes the step under way (a batch of deliveries is one transaction)."""
    services.model.stop()
    for loop in services.loops():
        loop.stop()
    for loop in services.loops():
        stop_loop(loop)
    log.info("workers stopped")


def stop_loop(loop) -> None:
    """Stop a worker and wait for the step under way."""
    loop.stop()
    if loop.is_alive():
        loop.join(STOP_WAIT)
        if loop.is_alive():
            log.warning(
                "%s still busy after %.0f s; leaving it (its work resumes at the next start)", loop.name, STOP_WAIT
            )


def _json_object(body: bytes) -> dict:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise Refused(400, "the body is not valid JSON") from None
    if not isinstance(value, dict):
        raise Refused(400, "the body must be a JSON object")
    return value


def _project_id(value) -> int | None:
    """Label Studio's project id from `"<id>.<timestamp>"` (or a bare id)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str):
        head = value.split(".", 1)[0].strip()
        if head.isdigit() and len(head) < 12:
            return int(head) or None
    return None
