"""The FastAPI app of `preflab serve`: Label Studio's ML backend and the webhook receiver, wired from a
router per concern (`routes/`), with the services they depend on (`deps.py`) in `app.state`, and the lifespan
that starts and stops the workers.

- `GET /health`: up or not, for Label Studio (which allows it one second) and for operators (`routes/health.py`);
- `POST /setup`, `POST /predict`: Label Studio's ML backend (`routes/backend.py`);
- `POST /webhook`: the delivery is stored raw and acknowledged once committed (`routes/webhooks.py`).

Requests are checked in this order, so a refused one stores nothing: the secret (401/403),
the size (413), then the JSON (400; a webhook body is kept in quarantine with the reason).
"""

from __future__ import annotations

import gc
import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from preflab.db.transactions import in_transaction
from preflab.errors import PreflabError, one_line
from preflab.server.access_log import AccessLog, note
from preflab.server.config import ServeConfig
from preflab.server.routes import backend, health, webhooks
from preflab.server.security import Refused
from preflab.server.services import Services, build_services
from preflab.settings import Settings

log = logging.getLogger("preflab.server")
STOP_WAIT = 15.0  # seconds shutdown waits for a worker's step under way


def create_app(settings: Settings, config: ServeConfig | None = None, *, background: bool = True) -> FastAPI:
    """The app; with `background`, its workers start and stop with it (uvicorn's lifespan).

    Raises:
        ConfigError, DatabaseError: before anything listens.
    """
    app = FastAPI(title="preflab", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.services = build_services(settings, config or ServeConfig())
    app.state.background = background
    app.add_middleware(AccessLog)
    app.add_exception_handler(Refused, refused)
    app.include_router(health.router)
    app.include_router(backend.router)
    app.include_router(webhooks.router)
    return app


@asynccontextmanager
async def lifespan(app: FastAPI):
    """Start the receiver and the scorer (and, with `background`, the workers); stop them at shutdown."""
    services: Services = app.state.services
    background: bool = app.state.background
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


async def refused(request: Request, exc: Refused) -> JSONResponse:
    """A refused request: its status and one sentence, which its access-log line notes too."""
    note(request, note=exc.reason)
    return JSONResponse({"error": exc.reason}, status_code=exc.status, headers=exc.headers)


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
