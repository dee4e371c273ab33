"""M_{t-1} and the iteration's judge, as the self-rewarding steps (`preflab.training.selfreward.steps`) reach them.

M_{t-1} runs on the loop's engine: in this process, loaded once per iteration through the
iteration's `ModelCache`, or on a server, answering under M_{t-1}'s own name. The judge is the
--judge-model, else M_{t-1} itself: a judge that reads a causal LM runs on the same engine, a
reward model (or pair ranker) in this process.
"""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy.orm import Session, sessionmaker

from preflab.labelling.judges.table import JUDGES
from preflab.lm.engines import Engine, EngineConfig, open_engine
from preflab.lm.names import ModelCache, NamedModel, load_named_model
from preflab.training.selfreward.state import Context


def _policy(ctx: Context, models: ModelCache) -> NamedModel:
    """M_{t-1}, loaded once per iteration."""
    return NamedModel(ctx.policy, ctx.policy_location, ctx.policy_id, *models.get(ctx.policy_location))


def iteration_judge(sessions: sessionmaker[Session], ctx: Context, models: ModelCache) -> NamedModel:
    """This iteration's judge model, loaded here: the --judge-model, else M_{t-1} itself (self-rewarding)."""
    cfg = ctx.config
    if cfg.judge_model:
        return load_named_model(sessions, cfg.judge_model, record=False, scorer=JUDGES[cfg.judge].scorer, cache=models)
    return _policy(ctx, models)


def policy_engine(sessions: sessionmaker[Session], ctx: Context, models: ModelCache) -> Engine:
    """M_{t-1} on the loop's engine (close it when done): in process, loaded on first use through `models`; on a
    server, served under its own name."""
    policy = NamedModel(ctx.policy, ctx.policy_location, ctx.policy_id, None, None)
    config = replace(ctx.engine or EngineConfig(), model=ctx.policy)
    return open_engine(config, sessions, model=policy, cache=models, batch_size=ctx.config.batch_size)


def judge_engine(sessions: sessionmaker[Session], ctx: Context, models: ModelCache) -> Engine:
    """The iteration's judge (one that reads a causal LM) on the loop's engine: the --judge-model, else M_{t-1}, by
    its name there (close it when done)."""
    cfg = ctx.config
    model = cfg.judge_model or NamedModel(ctx.policy, ctx.policy_location, ctx.policy_id, None, None)
    config = replace(ctx.engine or EngineConfig(), model=cfg.judge_model or ctx.policy)
    return open_engine(
        config, sessions, model=model, cache=models, batch_size=cfg.judge_config().batch_size, record=False
    )
