"""The train step of a self-rewarding iteration: M_t trained from M_{t-1} by DPO on the iteration's dataset version.

A run of this iteration that already succeeded is adopted; one a crash cut short is resumed
from its last checkpoint; the model version it made is recorded as the iteration's.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import Reporter
from preflab.db.models import DatasetVersion, ModelVersion, TrainingRun
from preflab.lm.names import ModelCache
from preflab.training.selfreward.state import Context, advance

METHOD = "dpo"  # the training method (`preflab.training.methods`) that makes M_t from M_{t-1}


def _adopt_or_resume(session: Session, run_dir: Path, kind: str) -> tuple[TrainingRun | None, bool]:
    """(a run of this iteration that already succeeded, whether to resume an unfinished one)."""
    from transformers.trainer_utils import get_last_checkpoint

    mine = list(
        session.scalars(
            select(TrainingRun)
            .where(TrainingRun.kind == kind, TrainingRun.output_path == str(run_dir))
            .order_by(TrainingRun.id)
        )
    )
    done = next((r for r in mine if r.status == "succeeded"), None)
    if done is not None:
        return done, False
    newest = session.scalars(
        select(TrainingRun)
        .where(TrainingRun.kind == kind, TrainingRun.status.in_(("running", "failed")))
        .order_by(TrainingRun.id.desc())
    ).first()
    checkpoints = run_dir / "checkpoints"
    resumable = (
        newest is not None
        and newest.output_path == str(run_dir)
        and checkpoints.is_dir()
        and get_last_checkpoint(str(checkpoints)) is not None
    )
    for run in mine:
        if run.status == "running" and not (resumable and run.id == newest.id):
            run.status, run.error = "failed", "interrupted; the self-reward loop started the iteration's training again"
    return None, resumable


def train_step(sessions: sessionmaker[Session], ctx: Context, models: ModelCache, reporter: Reporter) -> None:
    from preflab.training.methods import METHODS, train

    models.clear()  # training loads its own copies
    config = METHODS[METHOD].config.from_dict(ctx.dpo)
    run_dir = (ctx.folder / METHOD).resolve()
    with sessions.begin() as session:
        dataset_name = session.get(DatasetVersion, ctx.dataset_version_id).name
        done, resume = _adopt_or_resume(session, run_dir, METHODS[METHOD].kind(config))
        parent_name = session.get(ModelVersion, ctx.policy_id).name
    if done is None:
        result = train(
            METHOD,
            sessions,
            config,
            parent_name,
            dataset_name,
            resume=resume,
            output_dir=str(run_dir),
            reporter=reporter,
        )
        run_id = result.run_id
    else:
        run_id = done.id
    with sessions.begin() as session:
        run = session.get(TrainingRun, run_id)
        version = session.get(ModelVersion, run.output_model_version_id)
        run.iteration = version.iteration = ctx.iteration
        version.parent_id = ctx.policy_id
        metrics = {
            k: v
            for k, v in (run.metrics or {}).items()
            if k.startswith(("heldout_", "train_", "first_", "last_", "global_"))
        }
        reporter.note(f"iteration {ctx.iteration}: trained {version.name} from {ctx.policy} (DPO run {run.id})")
        advance(session, ctx, model_version_id=version.id, training_run_id=run.id, metrics={"dpo": metrics})
