"""Self-reward's judging step on a server: the likelihood judge asks the served M_0, as `judge likelihood` would.

Against the fault app (tests/fault_app.py), on SQLite and Postgres.
"""

from __future__ import annotations

from sqlalchemy import select

from preflab.db.models import Annotator, Ranking, SelfRewardIteration
from tests.training.selfreward.test_selfreward_engine import served_loop


def test_the_judging_step_ranks_on_the_server(cli, sessions, fault_server, tmp_path):
    url, _ = fault_server()
    row_id, run = served_loop(cli, sessions, url, tmp_path)
    for step in ("prompts", "candidates", "judge"):
        run(step)
    with sessions.begin() as session:
        metrics = session.get(SelfRewardIteration, row_id).metrics["judge"]
        judge = session.scalars(select(Annotator).where(Annotator.judge_kind == "likelihood")).one()
        rankings = session.scalars(select(Ranking).where(Ranking.annotator_id == judge.id)).all()
        items = [item for ranking in rankings for item in ranking.items]
    assert judge.model == "openai:fault-model" and metrics["model"] == "openai:fault-model"
    assert len(rankings) == metrics["ranked"] == 4 and metrics["unscored"] == 0
    # 8 candidates, each one request; each of the 4 conversations' own token ids, asked once for its replies
    # (vLLM reads a reply by token id: `preflab.lm.replies`); and the one-token probe for prompt log-probabilities.
    assert metrics["engine"]["requests"] == 8 + 4 + 1 == judge.config["engine"]["requests"]
    assert len(items) == 8 and all(item.score is not None and item.details["tokens"] > 0 for item in items)
