"""What is made from the pairs: dataset versions, training runs, model versions and self-rewarding iterations.

Each links to what it came from (a model version to its base and parent, a training
run to its dataset version), so a model's lineage can be read back. `JobLock` is the
named lease a job (a retrain) holds so that it runs once across processes (`preflab.db.locks`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from preflab.db.models.base import Base, _ts


class DatasetVersion(Base):
    __tablename__ = "dataset_versions"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    build_id: Mapped[int | None] = mapped_column(ForeignKey("pair_builds.id", ondelete="SET NULL"))
    settings: Mapped[dict[str, Any]] = mapped_column(JSON)
    n_train: Mapped[int] = mapped_column(Integer)
    n_test: Mapped[int] = mapped_column(Integer)
    n_prompts: Mapped[int] = mapped_column(Integer)
    content_hash: Mapped[str] = mapped_column(String(64))
    format: Mapped[str] = mapped_column(String(10))
    path: Mapped[str | None] = mapped_column(String(1000))
    hub_repo: Mapped[str | None] = mapped_column(String(300))
    hub_revision: Mapped[str | None] = mapped_column(String(100))
    iteration: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = _ts()


class ModelVersion(Base):
    __tablename__ = "model_versions"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    kind: Mapped[str] = mapped_column(String(20))  # base | policy | reward
    base_model: Mapped[str | None] = mapped_column(String(1000))
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("model_versions.id"))
    path: Mapped[str | None] = mapped_column(String(1000))
    iteration: Mapped[int | None] = mapped_column(Integer)
    is_current: Mapped[bool] = mapped_column(Boolean, default=False)
    metrics: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = _ts()


class TrainingRun(Base):
    __tablename__ = "training_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(30))  # reward | reward-grouped | dpo
    status: Mapped[str] = mapped_column(String(12), default="running")  # running | succeeded | failed
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    dataset_version_id: Mapped[int | None] = mapped_column(ForeignKey("dataset_versions.id"))
    base_model: Mapped[str | None] = mapped_column(String(1000))
    base_model_version_id: Mapped[int | None] = mapped_column(ForeignKey("model_versions.id"))
    output_model_version_id: Mapped[int | None] = mapped_column(ForeignKey("model_versions.id"))
    output_path: Mapped[str | None] = mapped_column(String(1000))
    metrics: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    world_size: Mapped[int] = mapped_column(Integer, default=1)
    iteration: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[datetime] = _ts()
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class SelfRewardIteration(Base):
    """One iteration of a self-rewarding loop (M_{t-1} → M_t) and the step it has reached.

    The loop resumes from `step` after a crash; the ids link the iteration to what
    it made (judge, dataset version, training run, model version).
    """

    __tablename__ = "self_reward_iterations"
    __table_args__ = (UniqueConstraint("loop", "iteration"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    loop: Mapped[str] = mapped_column(String(100))
    iteration: Mapped[int] = mapped_column(Integer)
    step: Mapped[str] = mapped_column(String(20))  # the next step to run; "done" when finished
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    policy_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id"))  # M_{t-1}
    model_version_id: Mapped[int | None] = mapped_column(ForeignKey("model_versions.id"))  # M_t
    judge_annotator_id: Mapped[int | None] = mapped_column(ForeignKey("annotators.id"))
    dataset_version_id: Mapped[int | None] = mapped_column(ForeignKey("dataset_versions.id"))
    training_run_id: Mapped[int | None] = mapped_column(ForeignKey("training_runs.id"))
    state: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    metrics: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    started_at: Mapped[datetime] = _ts()
    updated_at: Mapped[datetime] = _ts()
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class JobLock(Base):
    """A named lock in the database, so it holds across processes and machines."""

    __tablename__ = "job_locks"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200))
    acquired_at: Mapped[datetime] = _ts()
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
