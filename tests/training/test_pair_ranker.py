"""`preflab train pair-ranker` and `preflab judge pair-ranker`: a PairRM-style ranker learns a known preference.

The world: prompts and responses in the digit language of the toy world; the
simulated annotator ranks a prompt's four responses by their first digit, larger
first (distinct first digits, so every ranking is strict). The starting model is
the toy world's tiny base LM (`toy_base`), with a fresh one-label head.
"""

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from preflab.cli import cli
from preflab.db.models import Annotator, ModelVersion, Ranking, RankingItem, TrainingRun
from tests.toy_data import one_thread, toy_base  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slow

TRAIN = [
    "--max-steps",
    150,
    "--per-device-train-batch-size",
    8,
    "--learning-rate",
    2e-3,
    "--logging-steps",
    10,
    "--max-length",
    16,
    "--use-cpu",
    "--seed",
    0,
    "--save-steps",
    10_000,
]


def run(url, *args, expect_ok=True):
    result = CliRunner().invoke(cli, ["--database-url", url, *map(str, args)], catch_exceptions=False)
    if expect_ok:
        assert result.exit_code == 0, result.output
    return result


def first_digit(text: str) -> int:
    return int(text.split()[0])


def write_world(path: Path, prompts: int, seed: int, k: int = 4) -> Path:
    """Rankings JSON Lines: each prompt's k responses ranked by first digit, larger first."""
    from preflab.training.demos.toy_world import completion_text, prompt_text, sample_prompt

    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as handle:
        for i in range(prompts):
            firsts = rng.sample(range(10), k)
            responses = [completion_text([f] + [rng.randrange(10) for _ in range(3)]) for f in firsts]
            ranking = [[j] for j in sorted(range(k), key=lambda j: -firsts[j])]
            handle.write(
                json.dumps(
                    {
                        "prompt": prompt_text(sample_prompt(rng)),
                        "responses": responses,
                        "ranking": ranking,
                        "annotator": "first-digit",
                        "id": f"w{seed}-{i}",
                    }
                )
                + "\n"
            )
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory, toy_base):
    """A SQLite store with the world's pairs (25% of prompts held out) and a pair ranker trained on it."""
    import torch

    work = tmp_path_factory.mktemp("pair-ranker")
    url = f"sqlite:///{work / 'store.db'}"
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run(url, "import", "rankings", write_world(work / "world.jsonl", 80, seed=0))
        run(url, "pairs", "build")
        run(url, "export", work / "dataset", "--test-size", 0.25)
        report = json.loads(
            run(url, "train", "pair-ranker", "--model", toy_base, *TRAIN, "--output-dir", work / "run", "--json").stdout
        )
    finally:
        torch.set_num_threads(before)
    return url, report


def test_pair_ranker_learns_a_known_preference(trained, toy_base):
    url, report = trained
    metrics = report["metrics"]
    assert report["kind"] == "pair-ranker" and report["model_version"].startswith("pair-ranker-")
    assert metrics["global_step"] == 150 and metrics["last_loss"] < metrics["first_loss"] - 0.2, metrics
    # Held-out prompts (new prompts, new responses): far above the 0.5 of a coin.
    assert metrics["heldout_pairs"] > 50 and metrics["heldout_accuracy"] > 0.8, metrics
    from preflab.db.engine import open_sessions

    with open_sessions(url).begin() as session:
        (run_row,) = session.scalars(select(TrainingRun)).all()
        assert (run_row.kind, run_row.status, run_row.config["max_length"]) == ("pair-ranker", "succeeded", 16)
        version = session.get(ModelVersion, run_row.output_model_version_id)
        assert (version.kind, version.name, version.metrics) == ("pair-ranker", report["model_version"], metrics)
        assert session.get(ModelVersion, version.parent_id).path == str(toy_base)
    # The recorded numbers are the saved ranker's, and its two orders of a pair sum to one.
    from datasets import load_from_disk

    from preflab.lm.pair_ranker import load_pair_ranker, preference_probabilities

    test = load_from_disk(str(Path(report["path"]).parent / "data"))["test"]
    model, tokenizer, settings = load_pair_ranker(report["path"])
    assert settings["max_length"] == 16 and settings["conversational"] is False
    forward = preference_probabilities(model, tokenizer, test["prompt"], test["chosen"], test["rejected"], 16)
    swapped = preference_probabilities(model, tokenizer, test["prompt"], test["rejected"], test["chosen"], 16)
    assert metrics["heldout_accuracy"] == pytest.approx(sum(p > 0.5 for p in forward) / len(forward))
    assert max(abs(f + s - 1) for f, s in zip(forward, swapped)) < 1e-6
    assert sum(forward) / len(forward) > 0.7  # confident as well as right
    # The head was trained, not only the backbone: a bigger first digit scores higher than a smaller one.
    close = preference_probabilities(
        model, tokenizer, ["1 2 3 4 ="] * 2, ["9 1 1 1", "1 9 9 9"], ["2 1 1 1", "8 0 0 0"], 16
    )
    assert close[0] > 0.5 > close[1], close
    # `train eval` of the version scores its dataset's test split the same way.
    evaluated = json.loads(run(url, "train", "eval", report["model_version"], "--json").stdout)
    assert evaluated["kind"] == "pair-ranker" and evaluated["heldout_accuracy"] == metrics["heldout_accuracy"]
    # The bench reads each order's own verdict: how often the chosen reply wins when shown first, and second.
    position = evaluated["bench"]["position"]
    assert position["applies"] and position["chosen_shown_first"]["pairs"] == metrics["heldout_pairs"]
    assert 0 <= position["order_decides"] <= 1 and position["chosen_shown_second"]["accuracy"] is not None


def test_judge_ranks_candidates_and_stores_the_pairwise_probabilities(trained, db_url, tmp_path):
    """The judge ranks new prompts' candidates (by path or by model version) and keeps every pair's P."""
    _, report = trained
    run(db_url, "import", "rankings", write_world(tmp_path / "new.jsonl", 12, seed=7))
    out = json.loads(
        run(db_url, "judge", "pair-ranker", report["path"], "--aggregate", "bradley-terry", "--json").stdout
    )
    assert out["ranked"] == 12 and out["unscored"] == 0
    # The person's rankings are the known preference: the judge agrees with most of their pairs.
    assert out["report"]["human_agreement"]["pairwise_agreement"] > 0.75, out["report"]
    from preflab.db.engine import open_sessions

    with open_sessions(db_url).begin() as session:
        judge = session.scalars(select(Annotator).where(Annotator.judge_kind == "pair-ranker")).one()
        assert judge.config["aggregate"] == "bradley-terry"
        rankings = session.scalars(select(Ranking).where(Ranking.annotator_id == judge.id)).all()
        assert len(rankings) == 12
        items = session.scalars(select(RankingItem).where(RankingItem.ranking_id == rankings[0].id)).all()
    assert len(items) == 4 and sorted(i.tier for i in items) == [0, 1, 2, 3]
    probability = {}
    for item in items:
        assert len(item.details["pairs"]) == 3
        assert item.details["wins"] + item.details["losses"] + item.details["ties"] == 3
        for pair in item.details["pairs"]:
            assert 0 <= pair["p_as_a"] <= 1 and pair["p_as_a"] == pair["p_as_b"]
            probability[item.candidate_id, pair["vs"]] = pair["p_as_a"]
    for (a, b), p in probability.items():
        assert p + probability[b, a] == pytest.approx(1, abs=2e-4)  # stored rounded to 4 places
    # The best-ranked candidate beats each of the others with P > 1/2.
    best = next(i for i in items if i.tier == 0)
    assert all(pair["p_as_a"] > 0.5 for pair in best.details["pairs"])
    # A second run of the same judge keeps what it wrote.
    again = json.loads(
        run(db_url, "judge", "pair-ranker", report["path"], "--aggregate", "bradley-terry", "--json").stdout
    )
    assert (again["ranked"], again["kept"]) == (0, 12)


def test_a_model_that_is_not_a_pair_ranker_is_refused(toy_base, sqlite_url, tmp_path):
    """A reward model (one label, no pair_ranker.json) or a causal LM: one sentence, a non-zero exit."""
    from tests.tiny_models import tiny_reward_model

    run(sqlite_url, "import", "rankings", write_world(tmp_path / "new.jsonl", 2, seed=3))
    reward_model = tiny_reward_model(tmp_path / "reward-model")
    for model, says in ((reward_model, "is not a pair ranker"), (toy_base, "has 2 labels")):
        result = run(sqlite_url, "judge", "pair-ranker", model, expect_ok=False)
        assert result.exit_code != 0 and says in result.output and "Traceback" not in result.output, result.output
    from preflab.db.engine import open_sessions

    with open_sessions(sqlite_url).begin() as session:
        assert not session.scalars(select(Ranking).where(Ranking.source == "judge")).all()
