"""The state of one self-rewarding iteration: its steps, its context, and how a step records itself.

`loop.py` runs the iterations and `steps.py` does each step's work; both read and write
an iteration through these.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from preflab.db.conversation import Messages, prompt_columns, user_turn
from preflab.db.models import Candidate, ModelVersion, Prompt, Ranking, SelfRewardIteration
from preflab.db.store import chunks, ensure_prompts
from preflab.lm.engines.config import EngineConfig
from preflab.training.faults import fail_point
from preflab.training.selfreward.config import SelfRewardConfig

STEPS = ("prompts", "candidates", "judge", "pairs", "train", "evaluate", "done")


@dataclass
class Context:
    """What a step needs to know about its iteration (read afresh before every step)."""

    row_id: int
    loop: str
    iteration: int
    step: str
    config: SelfRewardConfig
    dpo: dict[str, Any]
    state: dict[str, Any]
    policy_id: int
    policy: str  # M_{t-1}'s label: what its candidates are stored under
    policy_location: str  # where from_pretrained finds it
    judge_annotator_id: int | None
    dataset_version_id: int | None
    model_version_id: int | None
    # Where M_{t-1} writes prompts and samples candidates (None: in this process); a run's setting, never stored.
    engine: EngineConfig | None = None

    @property
    def source(self) -> str:
        return f"self-reward:{self.loop}"

    @property
    def folder(self) -> Path:
        return Path(self.state["dir"]) / f"iter-{self.iteration}"


def load_context(sessions: sessionmaker[Session], row_id: int) -> Context:
    from preflab.lm.names import resolve_model

    with sessions.begin() as session:
        row = session.get(SelfRewardIteration, row_id)
        policy = session.get(ModelVersion, row.policy_id)
        label, location, _ = resolve_model(session, policy.name)
        return Context(
            row.id,
            row.loop,
            row.iteration,
            row.step,
            SelfRewardConfig.from_dict(row.config["loop"]),
            row.config["dpo"],
            dict(row.state or {}),
            row.policy_id,
            label,
            location,
            row.judge_annotator_id,
            row.dataset_version_id,
            row.model_version_id,
        )


def advance(session: Session, ctx: Context, state: dict | None = None, metrics: dict | None = None, **columns) -> None:
    """Record the step as done (and what it made), unless PREFLAB_FAIL_AT asks for a crash first."""
    fail_point("self-reward", ctx.step, ctx.iteration)
    row = session.get(SelfRewardIteration, ctx.row_id)
    row.step = STEPS[STEPS.index(ctx.step) + 1]
    now = datetime.now(timezone.utc)
    row.updated_at = now
    if row.step == "done":
        row.finished_at = now
    if state:
        row.state = {**(row.state or {}), **state}
    if metrics:
        row.metrics = {**(row.metrics or {}), **metrics}
    for name, value in columns.items():
        setattr(row, name, value)


def iteration_prompt_ids(session: Session, ctx: Context) -> list[int]:
    return list(
        session.scalars(
            select(Prompt.id).where(Prompt.source == ctx.source, Prompt.iteration == ctx.iteration).order_by(Prompt.id)
        )
    )


def tag_iteration(session: Session, ctx: Context, prompt_ids: list[int], annotator_id: int | None = None) -> None:
    """Mark this iteration's candidates (or the judge's rankings) with the iteration number."""
    for part in chunks(prompt_ids):
        if annotator_id is None:
            session.execute(
                update(Candidate)
                .where(Candidate.prompt_id.in_(part), Candidate.model == ctx.policy, Candidate.iteration.is_(None))
                .values(iteration=ctx.iteration)
            )
        else:
            session.execute(
                update(Ranking)
                .where(Ranking.prompt_id.in_(part), Ranking.annotator_id == annotator_id, Ranking.iteration.is_(None))
                .values(iteration=ctx.iteration)
            )


def store_prompts(
    sessions: sessionmaker[Session], ctx: Context, items: list[tuple[str | Messages, str | None]], written: bool
) -> None:
    """Store new prompts of this iteration (M_{t-1} as their author when it wrote them).

    Args:
        items: (prompt, reference); a prompt is its text, or its messages (a conversation).
    """
    from preflab.training.selfreward.prompts import prompt_key

    with sessions.begin() as session:
        ensure_prompts(
            session,
            {
                prompt_key(prompt): {
                    **prompt_columns(user_turn(prompt) if isinstance(prompt, str) else prompt),
                    "reference": reference,
                    "source": ctx.source,
                    "iteration": ctx.iteration,
                    "model_version_id": ctx.policy_id if written else None,
                }
                for prompt, reference in items
            },
        )


def count_iteration_prompts(session: Session, ctx: Context) -> int:
    return session.scalar(
        select(func.count()).select_from(Prompt).where(Prompt.source == ctx.source, Prompt.iteration == ctx.iteration)
    )
