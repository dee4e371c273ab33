"""Self-reward's judging step on a server: the likelihood judge asks the served M_0, as `judge likelihood` would.

Against the fault app (tests/fault_app.py), on SQLite and Postgres.
"""

from __future__ import annotations

import json

from sqlalchemy import select

from preflab.console import SILENT
from preflab.db.models import Annotator, Ranking, SelfRewardIteration
from tests.training.selfreward.test_selfreward_engine import EXAMPLES


def test_the_judging_step_ranks_on_the_server(cli, sessions, fault_server, tmp_path):
    from preflab.lm.engines import EngineConfig
    from preflab.lm.names import ModelCache
    from preflab.training.selfreward.config import SelfRewardConfig
    from preflab.training.selfreward.loop import _next_iteration
    from preflab.training.selfreward.state import load_context
    from preflab.training.selfreward.steps import STEP_FUNCTIONS

    url, faults = fault_server()
    examples = tmp_path / "examples.jsonl"
    examples.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in EXAMPLES), encoding="utf-8")
    cli("import", "prompts", examples)
    config = SelfRewardConfig(model="fault-model", prompts_per_iteration=4, shots=3, n=2, max_new_tokens=8,
                              judge="likelihood", eval_limit=0)
    engine = EngineConfig(engine="openai", api_base=url, model="fault-model")
    row_id = _next_iteration(sessions, config, {}, 1, "served", str(tmp_path / "loop"))
    for step in ("prompts", "candidates", "judge"):
        ctx = load_context(sessions, row_id)
        ctx.engine = engine
        STEP_FUNCTIONS[step](sessions, ctx, ModelCache(), SILENT)
    with sessions.begin() as session:
        metrics = session.get(SelfRewardIteration, row_id).metrics["judge"]
        judge = session.scalars(select(Annotator).where(Annotator.judge_kind == "likelihood")).one()
        rankings = session.scalars(select(Ranking).where(Ranking.annotator_id == judge.id)).all()
        items = [item for ranking in rankings for item in ranking.items]
    assert judge.model == "openai:fault-model" and metrics["model"] == "openai:fault-model"
    assert len(rankings) == metrics["ranked"] == 4 and metrics["unscored"] == 0
    # 8 candidates, each one request, and the one-token probe for prompt log-probabilities.
    assert metrics["engine"]["requests"] == 9 and judge.config["engine"]["requests"] == 9
    assert len(items) == 8 and all(item.score is not None and item.details["tokens"] > 0 for item in items)
