"""M_{t-1} and the iteration's judge, as the self-rewarding steps (`preflab.training.selfreward.steps`) reach them.

M_{t-1} is a model loaded once per iteration through the iteration's `ModelCache`, or, with a
server engine, the server answering under M_{t-1}'s own name; the judge is the --judge-model,
else M_{t-1} itself.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace

from sqlalchemy.orm import Session, sessionmaker

from preflab.labelling.judges.table import JUDGES
from preflab.lm.names import ModelCache, NamedModel, load_named_model
from preflab.training.selfreward.state import Context


def _policy(ctx: Context, models: ModelCache) -> NamedModel:
    """M_{t-1}, loaded once per iteration."""
    return NamedModel(ctx.policy, ctx.policy_location, ctx.policy_id, *models.get(ctx.policy_location))


def iteration_judge(sessions: sessionmaker[Session], ctx: Context, models: ModelCache) -> NamedModel:
    """This iteration's judge model: the --judge-model, else M_{t-1} itself (self-rewarding)."""
    cfg = ctx.config
    if cfg.judge_model:
        return load_named_model(sessions, cfg.judge_model, record=False, scorer=JUDGES[cfg.judge].scorer, cache=models)
    return _policy(ctx, models)


@contextmanager
def policy_engine(sessions: sessionmaker[Session], ctx: Context, models: ModelCache):
    """M_{t-1} as an engine: loaded here (once per iteration), or on the server, served under its own name."""
    if ctx.engine is None or ctx.engine.engine == "transformers":
        from preflab.lm.engines.local import TransformersEngine

        policy = _policy(ctx, models)
        yield TransformersEngine(policy.model, policy.tokenizer, policy.label, ctx.config.batch_size, policy.version_id)
        return
    from preflab.lm.engines import open_engine

    with open_engine(replace(ctx.engine, model=ctx.policy), sessions) as engine:
        yield engine


def on_server(ctx: Context) -> bool:
    return ctx.engine is not None and ctx.engine.engine != "transformers"
