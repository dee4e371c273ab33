"""Label Studio's ML backend: `POST /setup` (`{"model_version": …}`, cheap: Label Studio calls it
before every batch) and `POST /predict` (`{"results": [...]}`, one prediction per task, in order, within
`--predict-budget`; `scoring.py`: what is not ranked by then is ranked in the background for the next retrieve)."""

from __future__ import annotations

import orjson

from preflab.server.scoring import answer_predict
from preflab.server.security import Refused
from preflab.server.services import Services


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
