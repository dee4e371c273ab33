"""`preflab retrain`: the job a scheduler runs.

Under a lease in the database (so two overlapping runs, on one machine or many,
never both train): count the comparisons that the rankings made since the last
successful retrain would yield; with at least `min_new` of them, rebuild the
pairs, export a dataset version and train what the config file asks for (a
reward model and/or a DPO policy). A model version that trains successfully
becomes the current one of its kind; a run that fails leaves the previous one
current. With too few new comparisons the job says so and changes nothing.

The config file is read by `preflab.training.retrain.config`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.db.models import Annotator, DatasetVersion, ModelVersion, Ranking, RankingStatus, TrainingRun
from preflab.errors import LockHeld, TrainingError
from preflab.files import shared_mkdtemp
from preflab.settings import data_dir
from preflab.training.methods import train
from preflab.training.retrain.config import SECTIONS, RetrainConfig

LOCK = "retrain"


@dataclass
class RetrainResult:
    status: str  # trained | nothing-to-do | locked
    message: str
    new_comparisons: int = 0
    min_new: int = 0
    since: str | None = None  # the dataset version the count starts after
    dataset_version: str | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def last_trained_dataset(session: Session) -> DatasetVersion | None:
    """The dataset version of the newest retrain whose every training succeeded."""
    for version in session.scalars(select(DatasetVersion).order_by(DatasetVersion.id.desc())):
        settings = version.settings or {}
        if settings.get("job") == "retrain" and settings.get("trained"):
            return version
    return None


def count_new_pairs(session: Session, since: datetime | None, pairs: dict[str, str]) -> int:
    """Strict pairs (by the configured strategy) of the valid rankings made after `since`.

    Counted per ranking, before any aggregation across annotators.
    """
    from preflab.db.pairs.build import expand_tiers
    from preflab.training.selfreward.data import rankings_by_id

    query = (
        select(Ranking.id)
        .join(Annotator, Annotator.id == Ranking.annotator_id)
        .where(Ranking.status == RankingStatus.valid.value)
    )
    if pairs["annotator_kind"] != "any":
        query = query.where(Annotator.kind == pairs["annotator_kind"])
    if since is not None:
        query = query.where(Ranking.created_at > since)
    return sum(
        sum(1 for _ in expand_tiers(tiers, pairs["strategy"]))
        for _, _, _, tiers, _ in rankings_by_id(session, query).values()
    )


def current_version(session: Session, kind: str) -> ModelVersion | None:
    return session.scalars(
        select(ModelVersion)
        .where(ModelVersion.kind == kind, ModelVersion.is_current.is_(True))
        .order_by(ModelVersion.id.desc())
    ).first()


def make_current(session: Session, version_id: int) -> None:
    """Make this model version the current one of its kind (and no other)."""
    version = session.get(ModelVersion, version_id)
    session.execute(
        update(ModelVersion)
        .where(ModelVersion.kind == version.kind, ModelVersion.id != version.id, ModelVersion.is_current.is_(True))
        .values(is_current=False)
    )
    version.is_current = True


def retrain(
    sessions: sessionmaker[Session],
    config: RetrainConfig,
    default_model: str,
    min_new: int | None = None,
    reporter: Reporter = SILENT,
    after_run: Callable[[sessionmaker[Session]], None] | None = None,
) -> RetrainResult:
    """Run the retrain job once; see the module docstring.

    Args:
        min_new: new comparisons needed to retrain; default the config's `min_new`.
        reporter: notes each stage, and shows the training progress bars.
        after_run: called while the lock is still held, after every run that held it (trained,
            nothing to do, or failed), e.g. to write the report page.

    Raises:
        TrainingError: a configured training failed (the previous model version stays current).
    """
    from preflab.db.locks import hold

    min_new = config.min_new if min_new is None else min_new
    try:
        with hold(sessions, LOCK, config.lock_ttl) as lease:
            reporter.note(f"holding the {LOCK} lock as {lease.holder}")
            try:
                return _retrain(sessions, config, default_model, min_new, reporter)
            finally:
                if after_run is not None:
                    after_run(sessions)
    except LockHeld as exc:
        return RetrainResult("locked", f"skipped: {exc}", min_new=min_new)


def _retrain(
    sessions: sessionmaker[Session], config: RetrainConfig, default_model: str, min_new: int, reporter: Reporter
) -> RetrainResult:
    from preflab.db.export.job import export_dataset
    from preflab.db.locks import db_now
    from preflab.db.pairs.build import build_pairs

    with sessions.begin() as session:
        baseline = last_trained_dataset(session)
        since = datetime.fromisoformat(baseline.settings["rankings_until"]) if baseline else None
        cutoff = db_now(session)  # rankings made from here on count towards the next run
        new = count_new_pairs(session, since, config.pairs)
    since_name = baseline.name if baseline else None
    if new < min_new:
        where = f"since dataset version {since_name}" if since_name else "in the store"
        return RetrainResult(
            "nothing-to-do",
            f"nothing to do: {new:,} new comparisons {where} (at least {min_new:,} needed)",
            new,
            min_new,
            since_name,
        )
    root = Path(config.output_dir) if config.output_dir else data_dir() / "retrain"
    root.mkdir(parents=True, exist_ok=True)
    folder = shared_mkdtemp(f"{cutoff:%Y%m%dT%H%M%S}-", root)  # the runs and dataset in it are read by others
    with sessions.begin() as session:
        build = build_pairs(session, **config.pairs)
    with sessions.begin() as session:
        version = export_dataset(session, folder / "dataset", config.export)
        version.settings = {
            **version.settings,
            "job": "retrain",
            "rankings_until": cutoff.isoformat(),
            "trained": False,
        }
        dataset = version.name
    reporter.note(f"{new:,} new comparisons: rebuilt {build.pairs:,} pairs, exported dataset version {dataset}")
    runs = [_train_one(sessions, config, kind, default_model, dataset, folder, reporter) for kind in config.kinds()]
    failed = [r for r in runs if r["status"] == "failed"]
    if failed:
        kept = "; ".join(
            f"{r['kind']} run {r['run_id']} failed ({r['error']}), {r['current'] or 'no model'} stays current"
            for r in failed
        )
        raise TrainingError(f"retrain on {dataset}: {kept}")
    with sessions.begin() as session:
        row = session.get(DatasetVersion, version.id)
        row.settings = {**row.settings, "trained": True}
    names = ", ".join(f"{r['model_version']} ({r['kind']})" for r in runs)
    return RetrainResult(
        "trained", f"trained {names} on {dataset} ({new:,} new comparisons)", new, min_new, since_name, dataset, runs
    )


def _train_one(
    sessions: sessionmaker[Session],
    config: RetrainConfig,
    kind: str,
    default_model: str,
    dataset: str,
    folder: Path,
    reporter: Reporter,
) -> dict[str, Any]:
    from preflab.training.faults import trainer_callback

    model_kind = SECTIONS[kind].model_kind
    with sessions.begin() as session:
        current = current_version(session, model_kind)
        current_name = current.name if current else None
        last_run = session.scalar(select(func.max(TrainingRun.id))) or 0
    start = config.models.get(kind) or config.model or default_model
    if config.start_from == "current" and current is not None and current.path:
        start = current_name
    reporter.note(f"training {kind} from {start}")
    try:
        result = train(
            kind,
            sessions,
            config.trains[kind],
            start,
            dataset,
            output_dir=str(folder / kind),
            callbacks=[trainer_callback("retrain")],
            reporter=reporter,
        )
    except Exception as exc:  # the run is recorded as failed; the other kind may still train
        run_id = _failed_run_after(sessions, last_run)
        reporter.note(f"{kind} training failed: {exc}")
        return {
            "kind": kind,
            "status": "failed",
            "run_id": run_id,
            "error": str(exc).splitlines()[0][:300],
            "model_version": None,
            "current": current_name,
            "metrics": None,
        }
    with sessions.begin() as session:
        make_current(session, result.model_version_id)
    reporter.note(f"{result.model_version} is now the current {model_kind} model")
    return {
        "kind": kind,
        "status": "succeeded",
        "run_id": result.run_id,
        "error": None,
        "model_version": result.model_version,
        "current": result.model_version,
        "metrics": result.metrics,
    }


def _failed_run_after(sessions: sessionmaker[Session], last_run: int) -> int | None:
    """The run this job recorded before it failed (None when it failed before recording one)."""
    with sessions.begin() as session:
        return session.scalar(
            select(TrainingRun.id)
            .where(TrainingRun.id > last_run, TrainingRun.status == "failed")
            .order_by(TrainingRun.id.desc())
            .limit(1)
        )
