"""The Datasets and models section: dataset versions, training runs, the model lineage, current models.

These tables are small (a row per export, run or model), so they are read as
rows, newest first and capped; only the lineage walks back to every ancestor of
the models it shows.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from preflab.db.models import DatasetVersion, ModelVersion, TrainingRun
from preflab.report.privacy import excerpt, model_label
from preflab.report.reward_bench import reward_bench_rows

LIMIT = 20  # dataset versions and training runs listed
LINEAGE_LIMIT = 40  # newest model versions drawn (with their ancestors)
FILTER_KEYS = ("strategy", "aggregate", "annotator_kind", "test_size", "seed", "conversational", "with_human")
CONFIG_KEYS = ("learning_rate", "num_train_epochs", "max_steps", "beta", "loss_type", "grouped", "lora")
METRIC_KEYS = (
    "heldout_accuracy",
    "heldout_reward_accuracy",
    "heldout_reward_margin",
    "heldout_pairs",
    "first_loss",
    "last_loss",
    "global_step",
)


def _pick(values: dict[str, Any] | None, keys: tuple[str, ...]) -> dict[str, Any]:
    values = values or {}
    return {k: values[k] for k in keys if values.get(k) is not None and not isinstance(values[k], (dict, list))}


def _iso(moment) -> str | None:
    return moment.strftime("%Y-%m-%d %H:%M") if moment else None


def datasets(session: Session) -> list[dict[str, Any]]:
    rows = session.scalars(select(DatasetVersion).order_by(DatasetVersion.id.desc()).limit(LIMIT))
    return [
        {
            "name": d.name,
            "created": _iso(d.created_at),
            "train": d.n_train,
            "test": d.n_test,
            "prompts": d.n_prompts,
            "hash": d.content_hash[:12],
            "format": d.format,
            "iteration": d.iteration,
            "filters": _pick(d.settings, FILTER_KEYS),
            "hub": d.hub_repo,
        }
        for d in rows
    ]


def training_runs(session: Session) -> list[dict[str, Any]]:
    runs = list(session.scalars(select(TrainingRun).order_by(TrainingRun.id.desc()).limit(LIMIT)))
    ids = {r.dataset_version_id for r in runs} | {r.output_model_version_id for r in runs}
    names = {
        ("d", i): n
        for i, n in session.execute(select(DatasetVersion.id, DatasetVersion.name).where(DatasetVersion.id.in_(ids)))
    }
    names |= {
        ("m", i): n
        for i, n in session.execute(select(ModelVersion.id, ModelVersion.name).where(ModelVersion.id.in_(ids)))
    }
    out = []
    for r in runs:
        seconds = (r.finished_at - r.started_at).total_seconds() if r.finished_at and r.started_at else None
        out.append(
            {
                "id": r.id,
                "kind": r.kind,
                "status": r.status,
                "iteration": r.iteration,
                "dataset": names.get(("d", r.dataset_version_id)),
                "base": model_label(r.base_model),
                "model": names.get(("m", r.output_model_version_id)),
                "started": _iso(r.started_at),
                "seconds": seconds,
                "world_size": r.world_size,
                "config": {
                    k: v for k, v in _pick(r.config, CONFIG_KEYS).items() if not (k == "max_steps" and v < 1)
                },  # -1: epochs decide
                "metrics": _pick(r.metrics, METRIC_KEYS),
                "error": excerpt(r.error, 120) or None,
            }
        )
    return out


def _current_ids(session: Session) -> set[int]:
    """Per kind, the version marked current, else the newest one: the models the Current cards show."""
    marked = select(ModelVersion.kind, func.max(ModelVersion.id)).where(ModelVersion.is_current.is_(True))
    newest = select(ModelVersion.kind, func.max(ModelVersion.id))
    current = dict(session.execute(newest.group_by(ModelVersion.kind)).all())
    current.update(session.execute(marked.group_by(ModelVersion.kind)).all())
    return set(current.values())


def lineage(session: Session) -> dict[str, Any] | None:
    """The newest model versions, the current ones and all their ancestors, as nodes in layers and edges.

    Nodes are placed by depth from a root. "current" marks (★ on the chart) what `current_models` shows:
    per kind, the version marked current, else the newest.
    """
    newest = list(session.scalars(select(ModelVersion).order_by(ModelVersion.id.desc()).limit(LINEAGE_LIMIT)))
    if not newest:
        return None
    current = _current_ids(session)
    nodes = {m.id: m for m in newest}
    # A current model older than the newest drawn is drawn too: the caption promises its ★.
    nodes |= {m.id: m for m in session.scalars(select(ModelVersion).where(ModelVersion.id.in_(current - set(nodes))))}
    missing = {m.parent_id for m in nodes.values() if m.parent_id and m.parent_id not in nodes}
    while missing:  # parents of parents, a generation at a time
        found = list(session.scalars(select(ModelVersion).where(ModelVersion.id.in_(missing))))
        nodes |= {m.id: m for m in found}
        missing = {m.parent_id for m in found if m.parent_id and m.parent_id not in nodes}
    made_by = dict(
        session.execute(
            select(TrainingRun.output_model_version_id, TrainingRun.kind).where(
                TrainingRun.output_model_version_id.in_(list(nodes))
            )
        ).all()
    )
    depth: dict[int, int] = {}

    def depth_of(mid: int, seen: frozenset = frozenset()) -> int:
        if mid not in depth:
            parent = nodes[mid].parent_id
            depth[mid] = 0 if parent not in nodes or parent in seen else depth_of(parent, seen | {mid}) + 1
        return depth[mid]

    out_nodes = []
    for mid in sorted(nodes):
        m = nodes[mid]
        out_nodes.append(
            {
                "id": mid,
                "name": model_label(m.name),
                "kind": m.kind,
                "iteration": m.iteration,
                "current": mid in current,
                "depth": depth_of(mid),
                "parent": m.parent_id if m.parent_id in nodes else None,
                "made_by": made_by.get(mid),
            }
        )
    edges = [
        {"from": n["parent"], "to": n["id"], "label": n["made_by"] or "", "iteration": n["iteration"]}
        for n in out_nodes
        if n["parent"]
    ]
    total = session.scalar(select(func.count()).select_from(ModelVersion))
    return {"nodes": out_nodes, "edges": edges, "left_out": max(0, total - len(nodes))}


def current_models(session: Session) -> list[dict[str, Any]]:
    """Per kind: the version marked current, else the newest one (said so)."""
    out = []
    kinds = session.scalars(select(ModelVersion.kind).distinct()).all()
    for kind in sorted(kinds):
        current = session.scalars(
            select(ModelVersion)
            .where(ModelVersion.kind == kind, ModelVersion.is_current.is_(True))
            .order_by(ModelVersion.id.desc())
        ).first()
        marked = current is not None
        if current is None:
            current = session.scalars(
                select(ModelVersion).where(ModelVersion.kind == kind).order_by(ModelVersion.id.desc())
            ).first()
        out.append(
            {
                "kind": kind,
                "name": model_label(current.name),
                "marked_current": marked,
                "iteration": current.iteration,
                "created": _iso(current.created_at),
                "metrics": _pick(current.metrics, METRIC_KEYS),
            }
        )
    return out


def models_section(session: Session) -> dict[str, Any]:
    """Datasets, runs, lineage, current models and the reward-model bench (empty where there are none)."""
    return {
        "datasets": datasets(session),
        "runs": training_runs(session),
        "lineage": lineage(session),
        "current": current_models(session),
        "bench": reward_bench_rows(session),
    }
