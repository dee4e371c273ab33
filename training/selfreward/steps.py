"""The six steps of a self-rewarding iteration (see `preflab.training.selfreward.loop`).

Each step does its work in transactions of its own, then `advance` records it
as done. A step run again after a crash finds what an earlier attempt committed
and does only the rest. Every step is `step(sessions, ctx, models, reporter)`:
`models` is the iteration's `ModelCache`, so M_{t-1} and its judge load once
(`preflab.training.selfreward.policy`). The train step is in `train_step`.
"""

from __future__ import annotations

import random
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import Reporter
from preflab.db.models import Candidate, ModelVersion, Prompt
from preflab.errors import InputError, TrainingError
from preflab.labelling.judges.table import JUDGES
from preflab.lm.names import ModelCache
from preflab.training.selfreward.policy import iteration_judge, judge_engine, policy_engine
from preflab.training.selfreward.state import (
    Context,
    advance,
    count_iteration_prompts,
    iteration_prompt_ids,
    store_prompts,
    tag_iteration,
)
from preflab.training.selfreward.train_step import train_step

EXAMPLE_POOL = 512  # prompts drawn from the store to show as examples; each request shows `shots` of them


def _is_new(sessions: sessionmaker[Session]):
    from preflab.training.selfreward.prompts import prompt_key, stored_hashes

    def check(prompts: list) -> list[bool]:
        """Which prompts (texts, or conversations as messages) are not stored yet."""
        keys = [prompt_key(p) for p in prompts]
        with sessions.begin() as session:
            stored = stored_hashes(session, keys)
        return [key not in stored for key in keys]

    return check


def _examples(session: Session, ctx: Context) -> list[str]:
    """Stored prompts to show M_{t-1}: people's and imported ones, never held-out or loop-written ones.

    M_{t-1} is asked for a one-message task, so it is shown one-message prompts; only a store
    of conversations alone shows their last user messages.
    """
    held_out = set(ctx.state.get("eval_prompt_ids") or [])
    rows = [
        (pid, messages is None)
        for pid, messages in session.execute(
            select(Prompt.id, Prompt.messages)
            .where(Prompt.source.is_(None) | ~Prompt.source.startswith("self-reward:"))
            .order_by(Prompt.id)
        )
        if pid not in held_out
    ]
    ids = [pid for pid, single in rows if single] or [pid for pid, _ in rows]
    rng = random.Random(f"{ctx.config.seed}:{ctx.iteration}")
    chosen = sorted(rng.sample(ids, min(EXAMPLE_POOL, len(ids))))
    return list(session.scalars(select(Prompt.text).where(Prompt.id.in_(chosen)).order_by(Prompt.id))) if chosen else []


def _unanswered(summary) -> str:
    """ ", 1 prompt quarantined by the server, 2 samples unanswered" (those left for a re-run of the step)."""
    out = f", {summary.quarantined} prompts quarantined by the server" if summary.quarantined else ""
    return out + (f", {summary.failed} samples unanswered" if summary.failed else "")


def prompts_step(sessions: sessionmaker[Session], ctx: Context, models: ModelCache, reporter: Reporter) -> None:
    from preflab.training.selfreward.prompts import draw_with, pool_prompts, write_prompts

    cfg = ctx.config
    with sessions.begin() as session:
        missing = cfg.prompts_per_iteration - count_iteration_prompts(session, ctx)
        examples = [] if cfg.prompt_pool else _examples(session, ctx)
    detail, stats = "", None
    if missing > 0 and cfg.prompt_pool:
        items = pool_prompts(cfg.prompt_pool, missing, _is_new(sessions))
        store_prompts(sessions, ctx, items, written=False)
        detail = f" from {cfg.prompt_pool}"
    elif missing > 0:
        sampling = {
            "max_new_tokens": cfg.prompt_max_new_tokens,
            "temperature": cfg.prompt_temperature,
            "top_p": cfg.top_p,
        }
        with (
            policy_engine(sessions, ctx, models) as engine,
            reporter.progress(f"iteration {ctx.iteration}: writing prompts", missing) as step,
        ):
            written = write_prompts(
                draw_with(engine, **sampling),
                examples,
                missing,
                shots=cfg.shots,
                seed=cfg.seed,
                iteration=ctx.iteration,
                batch_size=max(cfg.batch_size, engine.concurrency),  # a server's slots kept busy
                is_new=_is_new(sessions),
                on_batch=lambda texts: (
                    store_prompts(sessions, ctx, [(t, None) for t in texts], True),
                    step(len(texts)),
                ),
            )
            stats = engine.stats.as_dict() if engine.stores_answers else None
        unanswered = f", {written.unanswered} unanswered" if written.unanswered else ""
        detail = (
            f" written by {ctx.policy} ({written.requests} asked, {written.duplicates} duplicates, "
            f"{written.unusable} unusable{unanswered})"
        )
    with sessions.begin() as session:
        have = count_iteration_prompts(session, ctx)
        if have == 0:
            raise InputError(
                f"iteration {ctx.iteration} got no new prompts{detail or ''}; "
                "give a prompt pool with more prompts, or more examples to show"
            )
        reporter.note(f"iteration {ctx.iteration}: {have} new prompts{detail}")
        advance(session, ctx, metrics={"prompts": have, **({"engine_prompts": stats} if stats else {})})


def candidates_step(sessions: sessionmaker[Session], ctx: Context, models: ModelCache, reporter: Reporter) -> None:
    from preflab.labelling.generation import GenerateConfig, GenerateSummary, generate_with, prompts_needing

    cfg = ctx.config
    gen = GenerateConfig(**cfg.sampling(), batch_size=cfg.batch_size)
    with sessions.begin() as session:
        ids = iteration_prompt_ids(session, ctx)
        todo = prompts_needing(session, ctx.policy, cfg.n, ids)
    summary, spent = GenerateSummary(), False
    if todo:
        # Stored under M_{t-1}'s own name wherever it ran, as the judge and pairs steps read them.
        with policy_engine(sessions, ctx, models) as engine:
            summary = generate_with(sessions, engine, gen, ids, ctx.policy_id, reporter, label=ctx.policy)
            spent = engine.stores_answers
    with sessions.begin() as session:
        tag_iteration(session, ctx, ids)
        total = session.scalar(
            select(func.count())
            .select_from(Candidate)
            .where(Candidate.model == ctx.policy, Candidate.iteration == ctx.iteration)
        )
        reporter.note(
            f"iteration {ctx.iteration}: {total} candidates from {ctx.policy} "
            f"({summary.stored} new, {summary.duplicates} duplicates, "
            f"{summary.short} prompts short of {cfg.n}{_unanswered(summary)})"
        )
        engine = {"engine_candidates": summary.engine} if spent and summary.engine else {}
        advance(session, ctx, metrics={"candidates": total, **engine})


def judge_step(sessions: sessionmaker[Session], ctx: Context, models: ModelCache, reporter: Reporter) -> None:
    from preflab.labelling.judges.run import judge_candidates, judge_on

    cfg = ctx.config
    with sessions.begin() as session:
        ids = iteration_prompt_ids(session, ctx)
    if not JUDGES[cfg.judge].scorer:
        # A judge that reads a causal LM runs where M_{t-1} does: the --judge-model, else M_{t-1}, by its name there.
        with judge_engine(sessions, ctx, models) as engine:
            label = engine.name
            summary = judge_on(sessions, cfg.judge, engine, cfg.judge_config(), ids, ctx.policy, reporter)
    else:
        judge = iteration_judge(sessions, ctx, models)
        label = judge.label
        summary = judge_candidates(
            sessions,
            cfg.judge,
            judge.model,
            judge.tokenizer,
            judge.label,
            cfg.judge_config(),
            ids,
            candidate_model=ctx.policy,
            reporter=reporter,
        )
    with sessions.begin() as session:
        tag_iteration(session, ctx, ids, summary.annotator_id)
        reporter.note(
            f"iteration {ctx.iteration}: {cfg.judge} judge ({label}) ranked "
            f"{summary.ranked + summary.kept} prompts ({summary.kept} already ranked), "
            f"{summary.unscored} candidates unscored"
        )
        advance(
            session,
            ctx,
            judge_annotator_id=summary.annotator_id,
            metrics={
                "judge": {
                    "kind": cfg.judge,
                    "model": label,
                    "run_id": summary.run_id,
                    "ranked": summary.ranked + summary.kept,
                    "unscored": summary.unscored,
                    **({"engine": summary.extra["engine"]} if "engine" in summary.extra else {}),
                }
            },
        )


def pairs_step(sessions: sessionmaker[Session], ctx: Context, models: ModelCache, reporter: Reporter) -> None:
    from preflab.training.selfreward.data import human_pairs, judge_pairs, write_iteration_dataset

    cfg = ctx.config
    with sessions.begin() as session:
        ids = iteration_prompt_ids(session, ctx)
        pairs = judge_pairs(session, ctx.judge_annotator_id, ids, cfg.pairs)
        from_judge = len(pairs)
        if cfg.with_human:
            since = ctx.state.get("human_since")
            pairs += human_pairs(
                session,
                datetime.fromisoformat(since) if since else None,
                set(ctx.state.get("eval_prompt_ids") or []),
                cfg.pairs,
            )
        if not pairs:
            raise TrainingError(
                f"iteration {ctx.iteration} has no preference pairs: the judge tied every prompt's "
                "candidates (try --pairs all, more candidates, or another --judge)"
            )
        version = write_iteration_dataset(
            session,
            pairs,
            ctx.folder / "dataset",
            f"self-reward-{ctx.loop}-{ctx.iteration}",
            ctx.iteration,
            {
                "job": "self-reward",
                "loop": ctx.loop,
                "iteration": ctx.iteration,
                "pairs": cfg.pairs,
                "with_human": cfg.with_human,
                "judge_annotator_id": ctx.judge_annotator_id,
            },
            cfg.test_size,
            cfg.seed,
        )
        counts = {
            "judge": from_judge,
            "human": len(pairs) - from_judge,
            "train": version.n_train,
            "test": version.n_test,
        }
        reporter.note(
            f"iteration {ctx.iteration}: dataset version {version.name}: {from_judge} judge pairs, "
            f"{counts['human']} from people ({version.n_train} train, {version.n_test} test)"
        )
        advance(session, ctx, dataset_version_id=version.id, metrics={"pairs": counts})


def evaluate_step(sessions: sessionmaker[Session], ctx: Context, models: ModelCache, reporter: Reporter) -> None:
    from preflab.labelling.judges.run import make_judge
    from preflab.lm.loading import resolve_model_path
    from preflab.training.evaluate import PolicyEval, held_out_prompts, win_rate
    from preflab.training.selfreward.report import judge_agreement

    cfg = ctx.config
    with sessions.begin() as session:
        version = session.get(ModelVersion, ctx.model_version_id)
        held_out = ctx.state.get("eval_prompt_ids") or []
        prompts = (
            held_out_prompts(
                session,
                select(Prompt.id, Prompt.text, Prompt.messages, Prompt.reference)
                .where(Prompt.id.in_(held_out))
                .order_by(Prompt.id),
            )
            if held_out
            else []
        )
        plan = PolicyEval(
            version.name, version.path, ctx.policy, str(resolve_model_path(ctx.policy_location)), True, prompts
        )
    report: dict[str, Any] = {"win_rate": None, "prompts": 0}
    if prompts:
        judge = iteration_judge(sessions, ctx, models)
        compare = make_judge(cfg.judge, judge.model, judge.tokenizer, cfg.judge_config())
        report = win_rate(plan, compare, cfg.eval_max_new_tokens, False, cfg.seed, cfg.batch_size)
        report |= {"judge": cfg.judge, "judge_model": judge.label}
    people = check_with_people(sessions, ctx, models, reporter)
    with sessions.begin() as session:
        agreement = judge_agreement(session, ctx.judge_annotator_id, iteration_prompt_ids(session, ctx))
        version = session.get(ModelVersion, ctx.model_version_id)
        version.metrics = {**(version.metrics or {}), "self_reward_eval": report, "judge_agreement": agreement}
        rate = "n/a (no held-out prompts)" if report["win_rate"] is None else f"{report['win_rate']:.3f}"
        reporter.note(
            f"iteration {ctx.iteration}: {version.name} vs {ctx.policy}: win rate {rate} "
            f"on {report['prompts']} held-out prompts"
        )
        advance(session, ctx, metrics={"eval": report, "judge_agreement": agreement, "judge_agreement_ranked": people})


def check_with_people(
    sessions: sessionmaker[Session], ctx: Context, models: ModelCache, reporter: Reporter
) -> dict[str, Any]:
    """The iteration's judge ranks prompts people ranked (`agreement_prompts` of them); its agreement with them.

    The loop's own prompts are new, so nobody has ranked them when the iteration
    ends; prompts people ranked before (the bundled sample rankings, say) show how
    far the judge that made this iteration's pairs can be trusted.
    """
    from preflab.db.models import Annotator, Ranking, RankingStatus
    from preflab.labelling.judges.run import judge_candidates
    from preflab.training.selfreward.report import judge_agreement

    cfg = ctx.config
    with sessions.begin() as session:
        ranked = list(
            session.scalars(
                select(Ranking.prompt_id)
                .join(Annotator, Annotator.id == Ranking.annotator_id)
                .where(Annotator.kind == "human", Ranking.status == RankingStatus.valid.value)
                .group_by(Ranking.prompt_id)
                .order_by(Ranking.prompt_id)
                .limit(cfg.agreement_prompts)
            )
        )
    if not ranked:
        with sessions.begin() as session:
            return judge_agreement(session, None, [])
    judge = iteration_judge(sessions, ctx, models)
    summary = judge_candidates(
        sessions, cfg.judge, judge.model, judge.tokenizer, judge.label, cfg.judge_config(), ranked, reporter=reporter
    )
    with sessions.begin() as session:
        agreement = judge_agreement(session, summary.annotator_id, ranked)
    share = agreement["pairwise_agreement"]
    reporter.note(
        f"iteration {ctx.iteration}: the judge agrees with people on "
        f"{'n/a' if share is None else format(share, '.2f')} of {agreement['shared_pairs']} pairs "
        f"of {agreement['prompts']} prompts they ranked"
    )
    return agreement


STEP_FUNCTIONS = {
    "prompts": prompts_step,
    "candidates": candidates_step,
    "judge": judge_step,
    "pairs": pairs_step,
    "train": train_step,
    "evaluate": evaluate_step,
}
