"""Label Studio's side of the store: the projects and tasks preflab pushed, and the gold answers mixed in."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    DateTime,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from preflab.db.models.base import Base, _ts
from preflab.db.models.rankings import OVERALL


class LSProject(Base):
    """A Label Studio project preflab created or imported from (no token stored)."""

    __tablename__ = "ls_projects"
    __table_args__ = (UniqueConstraint("base_url", "project_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    base_url: Mapped[str] = mapped_column(String(500))
    project_id: Mapped[int] = mapped_column(Integer)
    title: Mapped[str] = mapped_column(String(300))
    template: Mapped[str] = mapped_column(String(40))
    label_config: Mapped[str] = mapped_column(Text)
    synced_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = _ts()


class LSTask(Base):
    """A task pushed to Label Studio: which prompt, which candidates, in which order."""

    __tablename__ = "ls_tasks"
    __table_args__ = (
        UniqueConstraint("project_id", "task_id"),
        UniqueConstraint("project_id", "prompt_id", "candidate_set_hash"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("ls_projects.id", ondelete="CASCADE"))
    task_id: Mapped[int] = mapped_column(Integer)
    prompt_id: Mapped[int] = mapped_column(ForeignKey("prompts.id", ondelete="CASCADE"))
    candidate_set_hash: Mapped[str] = mapped_column(String(64))
    shown_order: Mapped[list[Any]] = mapped_column(JSON)  # candidate ids, top to bottom
    # Why `ls push --select` chose this task: {"strategy": ..., "score": ...}; NULL when unselected.
    selection: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = _ts()


class GoldAnswer(Base):
    """The known ranking of a gold task's prompt, stored apart from the rankings.

    Annotators' rankings of gold prompts are measured against it and never become
    training pairs.
    """

    __tablename__ = "gold_answers"
    # One known order per prompt and criterion (a gold line's `criterion`, `overall` by default).
    __table_args__ = (UniqueConstraint("prompt_id", "criterion"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    prompt_id: Mapped[int] = mapped_column(ForeignKey("prompts.id", ondelete="CASCADE"))
    criterion: Mapped[str] = mapped_column(String(40), default=OVERALL, server_default=OVERALL)
    tiers: Mapped[list[Any]] = mapped_column(JSON)  # candidate ids by tier, best first
    origin: Mapped[str | None] = mapped_column(String(500))  # the gold file
    created_at: Mapped[datetime] = _ts()
