"""`train reward --criterion NAME` and `--criteria a,b`: what a run by criterion reads and records, on both databases.

The store holds the criteria world's rankings (`preflab.training.demos.criteria_world`: each pool ranked by
helpfulness and by harmlessness). The runs are two steps long: what they learn is tested in
tests/training/demos/test_criteria_world.py; here, which pairs they read and what the store, the run folder and
the saved model say of their criteria.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from preflab.cli import cli
from preflab.db.models import DatasetVersion, ModelVersion, TrainingRun
from preflab.training.demos import criteria_world as world
from tests.toy_data import one_thread, toy_base  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slow

TWO_STEPS = [
    *("--max-steps", 2, "--per-device-train-batch-size", 8, "--learning-rate", 1e-3, "--max-length", 16),
    *("--use-cpu", "--seed", 0, "--logging-steps", 1),
]


def run(url, *args, expect_ok=True):
    result = CliRunner().invoke(cli, ["--database-url", url, *map(str, args)], catch_exceptions=False)
    if expect_ok:
        assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def store(db_url, sessions, tmp_path):
    """(URL, sessions) of a store holding 24 pools ranked by each criterion, their pairs built."""
    from preflab.db.ingest.jsonl import import_file, import_rankings_batch
    from preflab.db.pairs.build import build_pairs

    world.rankings_file(tmp_path / "rankings.jsonl", 24, seed=0)
    import_file(sessions, tmp_path / "rankings.jsonl", import_rankings_batch)
    with sessions.begin() as session:
        build_pairs(session)
    return db_url, sessions


def versions(sessions) -> list[DatasetVersion]:
    with sessions.begin() as session:
        found = session.scalars(select(DatasetVersion).order_by(DatasetVersion.id)).all()
        session.expunge_all()
        return found


def test_a_run_of_one_criterion_trains_on_its_pairs_and_names_its_head(store, toy_base):
    from datasets import load_from_disk
    from transformers import AutoConfig

    url, sessions = store
    report = json.loads(
        run(url, "train", "reward", "--model", toy_base, "--criterion", "harmlessness", *TWO_STEPS, "--json").stdout
    )
    (exported,) = versions(sessions)  # the run exported its criterion's pairs: there was no version of them
    assert exported.settings["criterion"] == "harmlessness" and report["dataset_version"] == exported.name
    data = load_from_disk(str(Path(report["path"]).parent / "data"))
    # Only harmlessness pairs: every chosen reply is safe and every rejected one carries the marker.
    rows = [row for split in data.values() for row in split]
    assert len(rows) == exported.n_train + exported.n_test == 24 * 9
    assert all(not world.unsafe(toy_digits(r["chosen"])) and world.unsafe(toy_digits(r["rejected"])) for r in rows)
    with sessions.begin() as session:
        (run_row,) = session.scalars(select(TrainingRun)).all()
        assert run_row.kind == "reward" and run_row.config["criterion"] == "harmlessness"
        assert run_row.dataset_version_id == exported.id
        version = session.get(ModelVersion, run_row.output_model_version_id)
        assert version.metrics["criterion"] == "harmlessness" == report["metrics"]["criterion"]
    assert AutoConfig.from_pretrained(report["path"]).id2label == {0: "harmlessness"}

    # Helpfulness has no version yet: one is exported; harmlessness's is reused while the pairs stay the same.
    run(url, "train", "reward", "--model", toy_base, "--criterion", "helpfulness", *TWO_STEPS)
    again = json.loads(
        run(url, "train", "reward", "--model", toy_base, "--criterion", "harmlessness", *TWO_STEPS, "--json").stdout
    )
    assert [v.settings["criterion"] for v in versions(sessions)] == ["harmlessness", "helpfulness"]
    assert again["dataset_version"] == exported.name


def toy_digits(text) -> list[int]:
    from preflab.training.demos import toy_world as toy

    return toy.parse_digits(text if isinstance(text, str) else text[0]["content"])


def test_a_multi_objective_run_trains_one_head_per_criterion_on_one_criteria_version(store, toy_base):
    from datasets import load_from_disk
    from transformers import AutoConfig

    url, sessions = store
    criteria = ",".join(world.CRITERIA)
    report = json.loads(
        run(url, "train", "reward", "--model", toy_base, "--criteria", criteria, *TWO_STEPS, "--json").stdout
    )
    assert report["kind"] == "reward-multi"
    by_name = {v.name: v for v in versions(sessions)}
    merged = by_name[report["dataset_version"]]
    # One version per criterion, exported for the run, and the criteria version over them.
    assert {by_name[name].settings["criterion"] for name in merged.settings["criteria"].values()} == set(world.CRITERIA)
    parts = [by_name[name] for name in merged.settings["criteria"].values()]
    assert merged.n_train + merged.n_test == sum(p.n_train + p.n_test for p in parts) == 2 * 24 * 9
    data = load_from_disk(str(Path(report["path"]).parent / "data"))
    for split in data.values():
        for row in split:
            chosen, rejected = toy_digits(row["chosen"]), toy_digits(row["rejected"])
            if row["criterion"] == "harmlessness":
                assert not world.unsafe(chosen) and world.unsafe(rejected)
            else:
                prompt = toy_digits(row["prompt"])
                assert world.helps(prompt, chosen) and not world.helps(prompt, rejected)
    # No prompt trains one head and tests another.
    assert not set(data["train"]["prompt_id"]) & set(data["test"]["prompt_id"])
    metrics = report["metrics"]
    assert metrics["criteria"] == list(world.CRITERIA)
    assert {c: h["heldout_pairs"] for c, h in metrics["heads"].items()} == {
        c: sum(1 for r in data["test"]["criterion"] if r == c) for c in world.CRITERIA
    }
    config = AutoConfig.from_pretrained(report["path"])
    assert config.num_labels == 2 and config.id2label == dict(enumerate(world.CRITERIA))
    with sessions.begin() as session:
        (run_row,) = session.scalars(select(TrainingRun)).all()
        assert run_row.config["criteria"] == criteria and run_row.dataset_version_id == merged.id
        assert session.get(ModelVersion, run_row.output_model_version_id).metrics["heads"] == metrics["heads"]

    # A second run reads the same criteria version; `train eval` scores each pair by its criterion's head.
    second = json.loads(
        run(url, "train", "reward", "--model", toy_base, "--criteria", criteria, *TWO_STEPS, "--json").stdout
    )
    assert second["dataset_version"] == merged.name and len(versions(sessions)) == 3
    bench = json.loads(run(url, "train", "eval", report["model_version"], "--bootstrap", 20, "--json").stdout)
    assert bench["dataset_version"] == merged.name
    assert bench["heldout_accuracy"] == pytest.approx(metrics["heldout_accuracy"])
    assert bench["heldout_pairs"] == metrics["heldout_pairs"]


@pytest.mark.one_database
def test_lora_heads_are_merged_and_keep_their_names(store, toy_base):
    from transformers import AutoConfig, AutoModelForSequenceClassification

    url, _ = store
    report = json.loads(
        run(
            url,
            "train",
            "reward",
            "--model",
            toy_base,
            "--criteria",
            "helpfulness,harmlessness",
            "--lora",
            *TWO_STEPS,
            "--json",
        ).stdout
    )
    config = AutoConfig.from_pretrained(report["path"])
    assert config.id2label == {0: "helpfulness", 1: "harmlessness"}
    model = AutoModelForSequenceClassification.from_pretrained(report["path"])
    assert model.score.weight.shape[0] == 2 and report["metrics"]["heads"]["helpfulness"]["heldout_pairs"] > 0


def test_runs_by_criterion_refuse_what_they_cannot_train_on(store, toy_base):
    url, sessions = store
    for args, message in (
        (["--criterion", "harmlessness", "--criteria", "a,b"], "give one of them"),
        (["--criteria", "harmlessness"], "--criteria names two criteria or more"),
        (["--criteria", "harmlessness,harmlessness"], "each once"),
        (["--criteria", "harmlessness,helpfulness", "--grouped"], "--grouped trains one head"),
        (["--criterion", "Harm"], "--criterion must be a criterion's short name"),
    ):
        result = run(url, "train", "reward", "--model", toy_base, *args, expect_ok=False)
        assert result.exit_code == 1 and message in result.output, (args, result.output)
    with sessions.begin() as session:
        assert session.scalar(select(func.count()).select_from(TrainingRun)) == 0

    # Both criteria held and none chosen: the export asks which.
    result = run(url, "train", "reward", "--model", toy_base, *TWO_STEPS, expect_ok=False)
    assert result.exit_code == 1 and "hold 2 criteria (harmlessness, helpfulness)" in result.output
    result = run(url, "train", "reward", "--model", toy_base, "--criterion", "honesty", *TWO_STEPS, expect_ok=False)
    assert "no pairs of criterion 'honesty'" in result.output

    helpful = json.loads(
        run(url, "train", "reward", "--model", toy_base, "--criterion", "helpfulness", *TWO_STEPS, "--json").stdout
    )["dataset_version"]
    wrong = run(
        url,
        "train",
        "reward",
        "--model",
        toy_base,
        "--criterion",
        "harmlessness",
        "--dataset-version",
        helpful,
        *TWO_STEPS,
        expect_ok=False,
    )
    assert f"dataset version {helpful} holds criterion helpfulness, not harmlessness" in wrong.output
    merged = json.loads(
        run(
            url, "train", "reward", "--model", toy_base, "--criteria", "harmlessness,helpfulness", *TWO_STEPS, "--json"
        ).stdout
    )["dataset_version"]
    # A criteria version is a multi-objective run's: one head, or a policy, would train on the mixture.
    for method in ("reward", "dpo"):
        refused = run(
            url, "train", method, "--model", toy_base, "--dataset-version", merged, *TWO_STEPS, expect_ok=False
        )
        assert refused.exit_code == 1 and "holds the pairs of several criteria" in refused.output, refused.output
    wrong = run(
        url,
        "train",
        "reward",
        "--model",
        toy_base,
        "--criteria",
        "harmlessness,helpfulness",
        "--dataset-version",
        helpful,
        *TWO_STEPS,
        expect_ok=False,
    )
    assert "holds criterion helpfulness, not criteria harmlessness, helpfulness" in wrong.output
