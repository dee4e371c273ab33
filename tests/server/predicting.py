"""What /predict is asked about: prompts imported from HH-RLHF rows (its published shape), pushed as `ls push`
pushes them, and the body Label Studio 1.23 posts (`ml/api_connector.py`: tasks, project, label_config, params)."""

from __future__ import annotations

import json
from pathlib import Path

from label_studio_sdk.label_interface import LabelInterface
from sqlalchemy import select

from preflab.db.models import Annotator, Ranking
from preflab.templates import label_config
from tests.labelling.ls_fixtures import make_cli
from tests.labelling.ls_helpers import session

THINGS = [
    "a cactus",
    "a goldfish",
    "sourdough starter",
    "a bicycle chain",
    "a wool jumper",
    "a cast-iron pan",
    "a leather boot",
    "an orchid",
    "a vinyl record",
    "a fountain pen",
]


def hh_rows(n: int) -> list[dict]:
    """`n` HH-RLHF rows (Anthropic/hh-rlhf: `chosen` and `rejected` transcripts), one question each."""
    rows = []
    for i in range(n):
        thing = THINGS[i % len(THINGS)]
        ask = f"\n\nHuman: How should I look after {thing} in week {i // len(THINGS) + 1}?\n\nAssistant:"
        rows.append(
            {
                "chosen": f"{ask} Keep {thing} clean and dry, and check on it every few days.",
                "rejected": f"{ask} No idea, sorry.",
            }
        )
    return rows


def import_hh(database_url: str, rows: list[dict], folder: Path) -> None:
    path = folder / "hh.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    make_cli(database_url)("import", "dataset", "--format", "hh-rlhf", path)


def pushed_tasks(database_url: str, base_url: str, project_id: int, template: str = "ranking") -> list[dict]:
    """One task per prompt, as `ls push` records and Label Studio then sends them (no Label Studio needed)."""
    from preflab.labelling.studio.projects import ensure_project
    from preflab.labelling.studio.push import _record, plan_tasks

    with session(database_url) as s:
        project = ensure_project(
            s, base_url, project_id, title=template, template=template, label_config=label_config(template)
        )
        planned, _ = plan_tasks(s, project)
        rows = [(1000 + n, t.prompt_id, t.set_hash, t.order) for n, t in enumerate(planned)]
        _record(s, project, rows)
        s.commit()
    return [{"id": tid, "project": project_id, "data": t.data} for (tid, *_), t in zip(rows, planned)]


def predict_body(tasks: list[dict], project_id: int, template: str = "ranking") -> dict:
    return {
        "tasks": tasks,
        "project": f"{project_id}.1700000000",
        "label_config": label_config(template),
        "params": {"login": None, "password": None, "context": None},
    }


def is_valid(prediction, template: str = "ranking") -> bool:
    """A prediction Label Studio stores: its result fits the labelling config, its score is in [0, 1]."""
    if not isinstance(prediction, dict) or not prediction.get("result"):
        return False
    return (
        0 <= prediction["score"] <= 1
        and LabelInterface(label_config(template)).validate_prediction(prediction, return_errors=True) == []
    )


def judge_rankings(database_url: str, annotator: str) -> list:
    """(prompt id, status) of every ranking the AI annotator stored."""
    with session(database_url) as s:
        return list(
            s.execute(
                select(Ranking.prompt_id, Ranking.status)
                .join(Annotator, Annotator.id == Ranking.annotator_id)
                .where(Annotator.kind == "ai", Annotator.name == annotator)
                .order_by(Ranking.prompt_id)
            ).all()
        )
