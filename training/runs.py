"""The lifecycle of a training run, the same on one process or many.

Rank 0 alone touches the database: it resolves the dataset version and the starting model, records the
run (status `running`) and hands every rank the plan. All ranks train. Rank 0 then scores the saved model on
the held-out split and records the metrics and a new model version; a crash, SIGTERM or Ctrl-C marks the run
`failed` with the error. What is trained and how is a method of the table in `preflab.training.methods`.
Under `torchrun`/`accelerate launch` the ranks read RANK and WORLD_SIZE from the environment; a plain
process is rank 0 of 1.

A run that succeeds deletes its checkpoints (unless `keep_checkpoints`): they
exist for `--resume`, and their optimizer state is often twice the model's
size. A failed run keeps them. The result says how much the run left on disk,
counting what it wrote elsewhere: the embedded model converted on its first use,
a dataset version exported for it.
"""

from __future__ import annotations

import os
import shutil
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.db.models import DatasetVersion, ModelVersion, TrainingRun
from preflab.errors import InputError, NotFound, PreflabError, TrainingError, one_line
from preflab.settings import data_dir
from preflab.training.progress import quiet_libraries


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    return rank() == 0


@dataclass
class RunPlan:
    """What rank 0 decided and every rank needs (sent to the others by broadcast)."""

    run_id: int
    kind: str
    config: dict[str, Any]
    dataset_version: str
    model_path: str  # where `from_pretrained` loads the starting model
    run_dir: str
    resume_from: str | None = None
    export_path: str | None = None  # a new run's dataset export, copied into the run folder before training
    elsewhere: list[dict[str, Any]] = field(default_factory=list)  # what planning wrote outside run_dir

    @property
    def data_dir(self) -> str:
        return str(Path(self.run_dir) / "data")

    @property
    def checkpoint_dir(self) -> str:
        return str(Path(self.run_dir) / "checkpoints")

    @property
    def model_dir(self) -> str:
        return str(Path(self.run_dir) / "model")


@dataclass
class RunResult:
    run_id: int
    kind: str
    model_version: str
    model_version_id: int
    path: str
    dataset_version: str
    metrics: dict[str, Any]
    world_size: int
    resumed: bool = False
    disk_bytes: int = 0  # what the run left on disk: its folder once done, and `elsewhere`
    elsewhere: list[dict[str, Any]] = field(default_factory=list)  # {"path", "what", "bytes"} outside the run folder
    freed_bytes: int = 0  # the checkpoints deleted when the run succeeded
    extra: dict[str, Any] = field(default_factory=dict)


# --- rank 0: planning and recording ------------------------------------------------------


def _starting_model(session: Session, model_name: str) -> tuple[str, str, int | None, list[dict[str, Any]]]:
    """(label, from_pretrained location, model version id, what was written) for the model a run starts from.

    The embedded model is converted into the model cache on its first use: that run wrote it.
    """
    from preflab.lm.loading import EMBEDDED, embedded_model, resolve_model_path
    from preflab.lm.names import resolve_model

    label, location, version_id = resolve_model(session, model_name)
    if location not in EMBEDDED:
        return label, str(resolve_model_path(location)), version_id, []
    folder, converted = embedded_model(location)
    return label, str(folder), version_id, [written(folder, f"{location} converted for it")] if converted else []


def written(path: str | Path, what: str) -> dict[str, Any]:
    """A folder a run wrote outside its own, measured now."""
    return {"path": str(path), "what": what, "bytes": folder_bytes(path)}


def plan_run(
    session: Session,
    kind: str,
    config: dict[str, Any],
    model_name: str,
    dataset_version: str | None = None,
    output_dir: str | None = None,
    criteria: Sequence[str] = (),
) -> RunPlan:
    """Record a new run (status running) on the pairs of `criteria` (none: any); its data is copied by `copy_data`
    once this is committed."""
    from preflab.training.data import resolve_dataset_version

    version, exported = resolve_dataset_version(session, dataset_version, criteria)
    label, location, version_id, elsewhere = _starting_model(session, model_name)
    if exported:  # the pairs had changed since the newest version
        elsewhere.append(written(version.path, f"dataset version {version.name} exported for it"))
    run = TrainingRun(
        kind=kind,
        status="running",
        config=config,
        dataset_version_id=version.id,
        base_model=label,
        base_model_version_id=version_id,
        world_size=world_size(),
    )
    session.add(run)
    session.flush()
    run_dir = _fresh_run_dir(session, Path(output_dir) if output_dir else None, f"{kind}-{run.id}")
    run.output_path = str(run_dir.resolve())
    return RunPlan(
        run.id, kind, config, version.name, location, run.output_path, export_path=version.path, elsewhere=elsewhere
    )


def copy_data(plan: RunPlan) -> None:
    """A private copy of the splits, in the form the starting model reads (`preflab.training.data.for_model`):
    the export stays untouched by tokenizer caches, and every rank reads the same files. Done outside
    the planning transaction, which it could hold for long."""
    from preflab.training.data import prepare_run_data

    prepare_run_data(plan.export_path, plan.model_path, plan.data_dir, plan.dataset_version)


def _fresh_run_dir(session: Session, chosen: Path | None, name: str) -> Path:
    """The folder of a new run, holding nothing from an earlier one.

    A default folder that exists already (another database sharing this data
    directory) gets a suffix. A chosen folder is reused, its previous run's
    checkpoints, data and model removed so a later --resume cannot pick them up,
    unless a model version still points into it.
    """
    if chosen is None:
        base = data_dir() / "runs" / name
        candidate, n = base, 1
        while candidate.exists():
            n += 1
            candidate = base.with_name(f"{name}-{n}")
        return candidate
    resolved = chosen.resolve()
    owner = session.scalar(
        select(ModelVersion.name).where(ModelVersion.path.in_([str(resolved / "model"), str(resolved)])).limit(1)
    )
    if owner is not None:
        raise InputError(f"{chosen} holds model version {owner}; choose another --output-dir")
    for part in ("checkpoints", "data", "model", "adapter"):
        shutil.rmtree(resolved / part, ignore_errors=True)
    return chosen


def plan_resume(session: Session, kind: str) -> RunPlan:
    """The newest unfinished run of this kind, to continue from its last checkpoint."""
    from transformers.trainer_utils import get_last_checkpoint

    run = session.scalars(
        select(TrainingRun)
        .where(TrainingRun.kind == kind, TrainingRun.status.in_(("running", "failed")))
        .order_by(TrainingRun.id.desc())
    ).first()
    if run is None or not run.output_path or not (Path(run.output_path) / "data").exists():
        raise NotFound(f"there is no unfinished {kind} run to resume")
    version = session.get(DatasetVersion, run.dataset_version_id)
    _label, location, _, elsewhere = _starting_model(session, _model_name(session, run))
    run.status, run.error, run.world_size, run.finished_at = "running", None, world_size(), None
    plan = RunPlan(
        run.id, kind, run.config, version.name if version else "?", location, run.output_path, elsewhere=elsewhere
    )
    checkpoints = Path(plan.checkpoint_dir)
    plan.resume_from = get_last_checkpoint(str(checkpoints)) if checkpoints.is_dir() else None
    return plan


def _model_name(session: Session, run: TrainingRun) -> str:
    if run.base_model_version_id:
        version = session.get(ModelVersion, run.base_model_version_id)
        if version is not None and version.kind != "base":
            return version.name
    return run.base_model


def record_success(session: Session, plan: RunPlan, metrics: dict[str, Any], model_kind: str) -> ModelVersion:
    """The run succeeded: its model version (`<model kind>-<run id>`, e.g. policy-3) points at the saved model."""
    run = session.get(TrainingRun, plan.run_id)
    base = session.get(ModelVersion, run.base_model_version_id) if run.base_model_version_id else None
    version = session.scalar(select(ModelVersion).where(ModelVersion.name == f"{model_kind}-{run.id}"))
    if version is None:
        version = ModelVersion(name=f"{model_kind}-{run.id}", kind=model_kind)
        session.add(version)
    version.base_model = base.base_model if base is not None and base.base_model else run.base_model
    version.parent_id = base.id if base is not None else None
    version.path, version.metrics = plan.model_dir, metrics
    version.iteration = run.iteration
    session.flush()
    run.status, run.metrics, run.error = "succeeded", metrics, None
    run.output_model_version_id = version.id
    run.finished_at = datetime.now(timezone.utc)
    return version


def record_failure(session: Session, run_id: int, error: str) -> None:
    run = session.get(TrainingRun, run_id)
    if run is not None:
        run.status, run.error, run.finished_at = "failed", error, datetime.now(timezone.utc)


# --- every rank ----------------------------------------------------------------------------


def _share(value):
    """Rank 0's value, on every rank."""
    if world_size() == 1:
        return value
    from accelerate.utils import broadcast_object_list

    box = [value]
    broadcast_object_list(box, from_process=0)
    return box[0]


def execute(
    method,
    config,
    sessions: sessionmaker[Session] | None,
    model_name: str,
    dataset_version: str | None = None,
    resume: bool = False,
    output_dir: str | None = None,
    callbacks: Sequence = (),
    reporter: Reporter = SILENT,
) -> RunResult | None:
    """Plan (rank 0), train (all ranks), evaluate and record (rank 0) a run of one training method.

    Args:
        method: the `preflab.training.methods.Method` to run (an entry of its `METHODS`).
        config: the method's config; on resume, the run's stored config replaces it.
        sessions: a sessionmaker on rank 0; None on the other ranks, which never open the database.
        model_name: the starting model: a model version, embedded name, local path or hub id.
        dataset_version: name or id; default the newest (exported first when out of date).
        resume: continue the newest unfinished run of this kind from its last checkpoint.
        callbacks: extra `transformers.TrainerCallback`s.
        reporter: shows the training progress (a bar, or step lines: `Reporter.steps`) and, when
            enabled, library bars.

    Returns:
        The run's result on rank 0, None elsewhere.
    """
    if method.prepare is not None and is_main_process() and not resume:
        config = method.prepare(sessions, config)
    with quiet_libraries(reporter.enabled):
        return _execute(method, config, sessions, model_name, dataset_version, resume, output_dir, callbacks, reporter)


def _execute(method, config, sessions, model_name, dataset_version, resume, output_dir, callbacks, reporter):
    kind = method.kind(config)
    if world_size() > 1:
        from accelerate import PartialState

        PartialState(cpu=config.device_settings()["use_cpu"])  # the process group the broadcasts use
    # Once the run is recorded, whatever ends it (an error, SIGTERM's SystemExit, Ctrl-C) records it failed.
    plan, failure, recorded = None, None, False
    try:
        if is_main_process():
            try:
                with sessions.begin() as session:
                    # should the commit fail, record_failure finds no run and records nothing
                    new = (config.as_dict(), model_name, dataset_version, output_dir, method.criteria(config))
                    plan = plan_resume(session, kind) if resume else plan_run(session, kind, *new)
                if plan.export_path:
                    copy_data(plan)
            except Exception as exc:  # the other ranks wait on the broadcast below: tell them, then raise
                failure = exc
                if plan is not None:
                    with sessions.begin() as session:
                        record_failure(session, plan.run_id, one_line(exc))
                    recorded = True
                    if not isinstance(exc, PreflabError):  # a starting model that cannot load: one line
                        failure = TrainingError(f"training run {plan.run_id} failed: {one_line(exc)}")
        shared = _share((plan, None if failure is None else str(failure)))
        if failure is not None:
            raise failure
        if shared[1] is not None:
            raise TrainingError(shared[1])
        plan = shared[0]
        config = method.config.from_dict(plan.config)
        from preflab.lm.loading import prefer_reusable_attention

        prefer_reusable_attention()
        metrics = method.fit(plan, config, callbacks, reporter)
        if is_main_process():
            metrics.update(method.evaluate(plan, config, sessions))
    except BaseException as exc:
        if recorded or plan is None:
            raise
        if is_main_process():
            with sessions.begin() as session:
                record_failure(session, plan.run_id, one_line(exc) + "\n" + traceback.format_exc(limit=-3))
        if isinstance(exc, Exception):
            raise TrainingError(f"training run {plan.run_id} failed: {one_line(exc)}") from exc
        raise
    if not is_main_process():
        return None
    with sessions.begin() as session:
        version = record_success(session, plan, metrics, method.model_kind)
        result = RunResult(
            plan.run_id,
            kind,
            version.name,
            version.id,
            version.path,
            plan.dataset_version,
            metrics,
            world_size(),
            resumed=plan.resume_from is not None,
            elsewhere=plan.elsewhere,
        )
    # Only once the success is recorded: a crash while deleting loses nothing the run needs.
    if not getattr(config, "keep_checkpoints", False):
        result.freed_bytes = folder_bytes(plan.checkpoint_dir)
        shutil.rmtree(plan.checkpoint_dir, ignore_errors=True)
    result.disk_bytes = folder_bytes(plan.run_dir) + sum(w["bytes"] for w in plan.elsewhere)
    return result


def folder_bytes(path: str | Path) -> int:
    """The bytes of the files under `path` (0 when it does not exist)."""
    root = Path(path)
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file() and not f.is_symlink()) if root.is_dir() else 0


def disk_size(n: int) -> str:
    """`517 MB`, `1.1 GB`: a size for people (decimal units, as `du -h --si` and file managers show)."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            value = n / scale
            return f"{value:.1f} {unit}" if value < 10 else f"{value:,.0f} {unit}"
    return f"{n:,} bytes"


def disk_note(result: RunResult) -> str:
    """`the run left 530 MB on disk (517 MB in ~/.cache/…, smollm2-135m-instruct converted for it; …)`."""
    details = [f"{disk_size(w['bytes'])} in {w['path']}, {w['what']}" for w in result.elsewhere]
    if result.freed_bytes:
        details.append(f"{disk_size(result.freed_bytes)} of checkpoints deleted; --keep-checkpoints keeps them")
    return f"the run left {disk_size(result.disk_bytes)} on disk" + (f" ({'; '.join(details)})" if details else "")
