"""Label Studio's ML backend: `POST /setup` (`{"model_version": …}`, cheap: Label Studio calls it
before every batch) and `POST /predict` (`{"results": [...]}`, one prediction per task, in order, within
`--predict-budget`; `scoring.py`: what is not ranked by then is ranked in the background for the next retrieve)."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from preflab.db.transactions import in_transaction
from preflab.errors import PreflabError, one_line
from preflab.server.access_log import note
from preflab.server.deps import ConfigDep, ModelDep, ServicesDep, SessionsDep, StudioDep, require_basic_auth
from preflab.server.scoring import answer_predict
from preflab.server.security import Refused, read_body
from preflab.server.services import Services

router = APIRouter(dependencies=[Depends(require_basic_auth)])


@router.post("/setup")
async def setup(request: Request, config: ConfigDep, sessions: SessionsDep, studio: StudioDep, model: ModelDep):
    body = _json_object(await read_body(request, config.max_body))
    project = _project_id(body.get("project"))  # the access_token it holds is neither logged nor kept
    if project is not None:
        studio.seen_projects.add(project)
    try:
        version = await run_in_threadpool(in_transaction, sessions, model.version)
    except PreflabError as exc:
        raise Refused(400, one_line(exc)) from None
    note(request, project=project, model_version=version)
    return {"model_version": version}


@router.post("/predict")
async def predict(request: Request, services: ServicesDep):
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
