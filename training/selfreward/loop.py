"""Self-rewarding iterative DPO (Yuan et al., 2024), run through preflab's own store.

Iteration t turns M_{t-1} into M_t in six steps, each recorded in
`self_reward_iterations` once its work is committed:

1. `prompts`    M_{t-1} writes new prompts, few-shot from 8 shown at a time
                (or they come from a pool file), de-duplicated against the store;
2. `candidates` M_{t-1} samples N candidates per prompt (temperature 0.7, top-p 0.9);
3. `judge`      a judge ranks them: by default M_{t-1} itself with the additive
                5-point prompt, read as the expected score from one forward
                pass (the `score` judge, `--judge-method expected`; `sampled`
                averages k = 3 sampled replies as the paper does);
4. `pairs`      highest vs lowest score per prompt (ties dropped) or every strict
                pair, plus people's rankings since the last iteration, become a
                dataset version;
5. `train`      DPO from M_{t-1} gives M_t (a model version whose parent is M_{t-1});
6. `evaluate`   M_t against M_{t-1} on held-out prompts by the same judge, and the
                judge's agreement with people where they ranked the same prompts
                (the iteration's, and up to `agreement_prompts` that people ranked).

Everything made carries the iteration (prompts, candidates, rankings, dataset
version, training run, model version). A stopped loop resumes at the step it
reached: every step is idempotent, and the ones that write a lot (prompts,
candidates, judgements) keep what earlier attempts committed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.db.engine import as_utc
from preflab.db.models import DatasetVersion, ModelVersion, Prompt, SelfRewardIteration
from preflab.errors import InputError
from preflab.lm.engines.config import EngineConfig
from preflab.settings import data_dir
from preflab.training.selfreward.config import SelfRewardConfig
from preflab.training.selfreward.state import load_context
from preflab.training.selfreward.steps import STEP_FUNCTIONS

# --- the loop ------------------------------------------------------------------------------


def run_self_reward(
    sessions: sessionmaker[Session],
    config: SelfRewardConfig,
    dpo_config,
    iterations: int,
    loop: str = "default",
    output_dir: str | None = None,
    reporter: Reporter = SILENT,
    *,
    engine: EngineConfig | None = None,
) -> list[dict[str, Any]]:
    """Run (or resume) the loop until it has `iterations` finished iterations.

    An unfinished iteration is finished first, with these settings for the
    steps it has still to run (see `preflab.training.selfreward.config.loop_settings`).
    Every step commits its work before it is recorded as done, so a crash loses
    at most the step in progress. Returns a summary per iteration run now.

    With a server `engine`, M_{t-1} writes its prompts and samples its candidates there,
    served under its model version's name; judging and DPO run here.
    """
    from preflab.lm.names import ModelCache

    if iterations < 1:
        raise InputError("--iterations must be at least 1")
    done = []
    while True:
        row_id = _next_iteration(sessions, config, dpo_config.as_dict(), iterations, loop, output_dir)
        if row_id is None:
            break
        models = ModelCache()  # an iteration's steps share M_{t-1} and its judge
        try:
            while True:
                ctx = load_context(sessions, row_id)
                ctx.engine = engine
                if ctx.step == "done":
                    break
                started = time.perf_counter()
                STEP_FUNCTIONS[ctx.step](sessions, ctx, models, reporter)
                reporter.note(
                    f"iteration {ctx.iteration}: {ctx.step} step done in {time.perf_counter() - started:.1f} s"
                )
        finally:
            models.clear()
        done.append(iteration_summary(sessions, row_id))
    return done


def _eval_prompt_ids(sessions: sessionmaker[Session], config: SelfRewardConfig) -> list[int]:
    """The held-out prompts every iteration is evaluated on (chosen once, at iteration 1)."""
    from preflab.db.export.dataset import split_prompts
    from preflab.labelling.selection import prompts_from_file

    if config.eval_limit == 0:
        return []
    if config.eval_prompts:
        return prompts_from_file(sessions, config.eval_prompts)[: config.eval_limit]
    with sessions.begin() as session:
        held_out = list(
            session.scalars(
                select(Prompt.id).where(Prompt.split == "test").order_by(Prompt.id).limit(config.eval_limit)
            )
        )
        if held_out:
            return held_out
        seeds = dict(
            session.execute(
                select(Prompt.id, Prompt.content_hash).where(
                    Prompt.source.is_(None) | ~Prompt.source.startswith("self-reward:")
                )
            ).all()
        )
    # No held-out split yet: a fifth of the stored prompts (at most eval_limit), the rest stay examples.
    share = min(config.eval_limit, len(seeds) // 5) / len(seeds) if seeds else 0
    if share == 0:
        return []
    return sorted(pid for pid, split in split_prompts(seeds, share, config.seed).items() if split == "test")


def _next_iteration(
    sessions: sessionmaker[Session],
    config: SelfRewardConfig,
    dpo: dict,
    iterations: int,
    loop: str,
    output_dir: str | None,
) -> int | None:
    """The id of the iteration to work on: the unfinished one, else a new one; None when done."""
    with sessions.begin() as session:
        rows = list(
            session.scalars(
                select(SelfRewardIteration)
                .where(SelfRewardIteration.loop == loop)
                .order_by(SelfRewardIteration.iteration)
            )
        )
        if rows and rows[-1].step != "done":
            rows[-1].config = {"loop": config.as_dict(), "dpo": dpo}
            return rows[-1].id
        if len(rows) >= iterations:
            return None
        first = not rows
    eval_ids = _eval_prompt_ids(sessions, config) if first else None
    with sessions.begin() as session:
        from preflab.lm.names import resolve_model

        if first:
            from preflab.settings import DEFAULT_MODEL

            _, _, policy_id = resolve_model(session, config.model or DEFAULT_MODEL)
            folder = Path(output_dir) if output_dir else data_dir() / "self-reward" / loop
            state = {"dir": str(folder.resolve()), "eval_prompt_ids": eval_ids, "human_since": None}
        else:
            previous = rows[-1]
            dataset = session.get(DatasetVersion, previous.dataset_version_id)
            policy_id = previous.model_version_id
            state = {
                "dir": previous.state["dir"],
                "eval_prompt_ids": previous.state["eval_prompt_ids"],
                "human_since": as_utc(dataset.created_at).isoformat(),
            }
        row = SelfRewardIteration(
            loop=loop,
            iteration=len(rows) + 1,
            step="prompts",
            policy_id=policy_id,
            config={"loop": config.as_dict(), "dpo": dpo},
            state=state,
        )
        session.add(row)
        session.flush()
        return row.id


def iteration_summary(sessions: sessionmaker[Session], row_id: int) -> dict[str, Any]:
    with sessions.begin() as session:
        row = session.get(SelfRewardIteration, row_id)
        version = session.get(ModelVersion, row.model_version_id) if row.model_version_id else None
        parent = session.get(ModelVersion, row.policy_id)
        metrics = row.metrics or {}
        return {
            "loop": row.loop,
            "iteration": row.iteration,
            "step": row.step,
            "parent": parent.name,
            "model_version": version.name if version else None,
            "win_rate": (metrics.get("eval") or {}).get("win_rate"),
            "judge_agreement": (metrics.get("judge_agreement") or {}).get("pairwise_agreement"),
            "judge_agreement_ranked": metrics.get("judge_agreement_ranked"),
            "engine": {"prompts": metrics.get("engine_prompts"), "candidates": metrics.get("engine_candidates")},
            **{k: metrics.get(k) for k in ("prompts", "candidates", "pairs")},
        }
