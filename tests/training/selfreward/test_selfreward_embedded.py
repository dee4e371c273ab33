"""One self-rewarding iteration on the embedded SmolLM2-135M-Instruct, the model every user has.

Before the expected-score judge, this model never wrote a parseable "Score: n",
so the judge tied every prompt's candidates and the loop stopped at its first
iteration with no pairs. Tiny settings keep it to a few minutes on two CPU cores.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from preflab.db.models import Annotator, Ranking, RankingItem, SelfRewardIteration
from tests.tiny_models import embedded_model_cache  # noqa: F401  (fixture)
from tests.training.selfreward.selfreward_world import one_torch_thread  # noqa: F401  (fixture)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread", "embedded_model_cache")]

TINY = [
    "--prompts-per-iteration",
    2,
    "--shots",
    2,
    "--prompt-max-new-tokens",
    24,
    "-n",
    2,
    "--max-new-tokens",
    16,
    "--eval-limit",
    1,
    "--eval-max-new-tokens",
    16,
    "--agreement-prompts",
    1,
    "--test-size",
    0,
    "--max-steps",
    1,
    "--per-device-train-batch-size",
    2,
    "--max-length",
    256,
    "--use-cpu",
    "--logging-steps",
    1,
]


def test_one_iteration_on_the_embedded_model_judges_every_candidate(sqlite_url, sample_rankings, tmp_path):
    from click.testing import CliRunner

    from preflab.cli import cli as root
    from preflab.db.engine import open_database, session_factory

    def cli(*args):
        result = CliRunner().invoke(root, ["--database-url", sqlite_url, *map(str, args)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result

    cli("import", "rankings", sample_rankings)  # examples to write prompts from, and people's rankings
    (summary,) = json.loads(
        cli("self-reward", "--iterations", 1, *TINY, "--output-dir", tmp_path / "loop", "--json").stdout
    )
    assert summary["step"] == "done" and summary["prompts"] == 2
    assert summary["pairs"]["judge"] >= 1 and summary["win_rate"] is not None
    # The judge that made the pairs also ranked a prompt people ranked: its agreement with them is measured.
    people = summary["judge_agreement_ranked"]
    assert people["prompts"] == 1 and people["shared_pairs"] > 0

    sessions = session_factory(open_database(sqlite_url))
    with sessions.begin() as session:
        row = session.scalars(select(SelfRewardIteration)).one()
        judge = session.get(Annotator, row.judge_annotator_id)
        assert judge.judge_kind == "score" and judge.config["method"] == "expected"
        items = session.execute(
            select(RankingItem.score, RankingItem.details)
            .join(Ranking, Ranking.id == RankingItem.ranking_id)
            .where(Ranking.iteration == 1)
        ).all()
        # Every candidate got a score, with the probability mass its score tokens took.
        assert items and all(score is not None and 0 <= score <= 5 for score, _ in items)
        assert all(0 < details["mass"] <= 1 for _, details in items)
