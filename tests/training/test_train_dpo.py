"""`preflab train dpo`: TRL's DPOTrainer from a base model or a model version, LoRA included."""

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from preflab.cli import cli
from preflab.db.models import ModelVersion, TrainingRun
from tests.toy_data import one_thread, toy_base, toy_store  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slow

FAST = [
    "--max-steps",
    16,
    "--per-device-train-batch-size",
    8,
    "--learning-rate",
    2e-3,
    "--logging-steps",
    4,
    "--max-length",
    16,
    "--use-cpu",
    "--beta",
    0.1,
]


def run(url, *args, expect_ok=True):
    result = CliRunner().invoke(cli, ["--database-url", url, *map(str, args)], catch_exceptions=False)
    if expect_ok:
        assert result.exit_code == 0, result.output
    return result


def pair_gaps(model_path, pairs) -> list[float]:
    """log π(chosen) − log π(rejected) of each pair."""
    from preflab.lm.loading import load_causal_lm
    from preflab.lm.scoring import completion_logprobs

    model, tokenizer = load_causal_lm(model_path)
    chosen = completion_logprobs(model, tokenizer, pairs["prompt"], pairs["chosen"])
    rejected = completion_logprobs(model, tokenizer, pairs["prompt"], pairs["rejected"])
    return [c - r for c, r in zip(chosen, rejected)]


def chosen_minus_rejected(model_path, pairs) -> float:
    """Mean log π(chosen) − log π(rejected) over the pairs."""
    gaps = pair_gaps(model_path, pairs)
    return sum(gaps) / len(gaps)


def test_dpo_raises_chosen_over_rejected_and_records_a_policy(toy_store, toy_base):
    from datasets import load_from_disk

    url, sessions = toy_store
    report = json.loads(run(url, "train", "dpo", "--model", toy_base, *FAST, "--json").stdout)
    train = load_from_disk(str(Path(report["path"]).parent / "data"))["train"][:]
    assert chosen_minus_rejected(report["path"], train) > chosen_minus_rejected(toy_base, train) + 0.5
    metrics = report["metrics"]
    assert metrics["last_loss"] < metrics["first_loss"] and metrics["global_step"] == 16
    assert metrics["train_rewards_margins"] > 0 and metrics["train_rewards_accuracies"] > 0.5
    # Held-out implicit-reward numbers are the saved policy's against its base on the run's test split:
    # a pair's margin is β·[(log π − log π_ref)(chosen) − (log π − log π_ref)(rejected)].
    test = load_from_disk(str(Path(report["path"]).parent / "data"))["test"][:]
    margins = [0.1 * (p - b) for p, b in zip(pair_gaps(report["path"], test), pair_gaps(toy_base, test))]
    assert metrics["heldout_pairs"] == len(margins) > 0
    assert metrics["heldout_reward_margin"] == pytest.approx(sum(margins) / len(margins), abs=1e-4)
    assert metrics["heldout_reward_accuracy"] == pytest.approx(sum(m > 0 for m in margins) / len(margins))
    assert metrics["heldout_chosen_reward"] - metrics["heldout_rejected_reward"] == pytest.approx(
        metrics["heldout_reward_margin"]
    )
    with sessions.begin() as session:
        (run_row,) = session.scalars(select(TrainingRun)).all()
        assert (run_row.kind, run_row.status, run_row.config["beta"]) == ("dpo", "succeeded", 0.1)
        assert run_row.config["precompute_ref_log_probs"] is True and run_row.config["loss_type"] == "sigmoid"
        policy = session.get(ModelVersion, run_row.output_model_version_id)
        assert (policy.kind, policy.name, policy.path) == ("policy", report["model_version"], report["path"])
        assert session.get(ModelVersion, policy.parent_id).path == str(toy_base)

    # A second round starts from the policy (a model version): lineage and the root base model carry over.
    second = json.loads(run(url, "train", "dpo", "--model", policy.name, *FAST, "--max-steps", 4, "--json").stdout)
    with sessions.begin() as session:
        child = session.scalars(select(ModelVersion).where(ModelVersion.name == second["model_version"])).one()
        assert child.parent_id == policy.id and child.base_model == str(toy_base)
        run_row = session.scalars(select(TrainingRun).where(TrainingRun.id == second["run_id"])).one()
        assert run_row.base_model_version_id == policy.id


def test_lora_dpo_without_precomputed_reference_saves_a_merged_model(toy_store, toy_base):
    from safetensors.torch import load_file

    url, _ = toy_store
    report = json.loads(
        run(
            url,
            "train",
            "dpo",
            "--model",
            toy_base,
            *FAST,
            "--lora",
            "--lora-r",
            4,
            "--no-precompute-ref-log-probs",
            "--json",
        ).stdout
    )
    run_dir = Path(report["path"]).parent
    assert (run_dir / "adapter" / "adapter_config.json").is_file()
    merged, base = load_file(f"{report['path']}/model.safetensors"), load_file(f"{toy_base}/model.safetensors")
    assert set(merged) == set(base)  # plain weights: the adapters are merged in
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not merged[name].equal(base[name])
    assert merged["model.embed_tokens.weight"].equal(base["model.embed_tokens.weight"])  # LoRA left it alone
    assert report["metrics"]["last_loss"] < report["metrics"]["first_loss"]


def test_dpo_options_are_checked_before_anything_runs(toy_store):
    url, sessions = toy_store
    for args, message in (
        (["--beta", "0"], "--beta must be positive"),
        (["--loss-type", "sigmoid,nope"], "unknown --loss-type 'nope'"),
        (["--loss-type", "sigmoid,sft", "--loss-weights", "1"], "has 1 weights for 2 losses"),
    ):
        result = run(url, "train", "dpo", *args, expect_ok=False)
        assert result.exit_code == 1 and message in result.output
    with sessions.begin() as session:
        assert session.scalars(select(TrainingRun)).all() == []


def test_reference_log_probs_are_computed_for_the_rows_the_run_trains_on_only(toy_store, toy_base):
    # TRL precomputes them for every row it is given: a 10-step run spent 4 minutes on all 45 batches first.
    from datasets import load_from_disk
    from transformers import TrainerCallback

    from preflab.training.config import DPOTrainConfig
    from preflab.training.methods import train

    class Given(TrainerCallback):
        rows = columns = None

        def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
            Given.rows, Given.columns = len(train_dataloader.dataset), train_dataloader.dataset.column_names

    _, sessions = toy_store
    config = DPOTrainConfig(
        max_steps=8,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        learning_rate=2e-3,
        max_length=16,
        use_cpu=True,
        logging_steps=2,
        beta=0.1,
    )
    result = train("dpo", sessions, config, str(toy_base), callbacks=[Given()])
    assert "ref_chosen_logps" in Given.columns and "ref_rejected_logps" in Given.columns
    assert Given.rows == 8 * 4 * 2  # steps × batch × accumulation, of the whole split's rows
    train = load_from_disk(str(Path(result.path).parent / "data"))["train"][:]
    assert len(train["prompt"]) > Given.rows
    metrics = result.metrics
    assert metrics["global_step"] == 8 and metrics["epochs"] == pytest.approx(64 / len(train["prompt"]))
    # It still learns: DPO's loss over the whole split fell from ln 2, where the policy is its reference (the base),
    # to 0.608 here, and the policy prefers the chosen responses more. The logged loss of the first two steps
    # against the last two (0.677 -> 0.662 here) is too close to tell on every machine.
    after, before = pair_gaps(result.path, train), pair_gaps(toy_base, train)
    loss = sum(math.log1p(math.exp(-0.1 * (a - b))) for a, b in zip(after, before)) / len(after)
    assert loss < math.log(2) - 0.03 and metrics["train_rewards_margins"] > 0, (loss, metrics)
    assert sum(after) / len(after) > sum(before) / len(before) + 0.5


def test_rows_trl_would_drop_are_not_drawn_for_a_max_steps_run():
    """TRL drops a row whose prompt alone fills max_length: drawing it would leave the run fewer pairs."""
    from datasets import Dataset

    from preflab.training.config import DPOTrainConfig
    from preflab.training.dpo import rows_reached
    from tests.tiny_models import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    long_prompt = " ".join(["the answer is four"] * 40)
    rows = [{"prompt": long_prompt if i % 2 else f"q {i}", "chosen": "yes", "rejected": "no"} for i in range(40)]
    config = DPOTrainConfig(max_steps=3, per_device_train_batch_size=4, max_length=32, use_cpu=True)
    chosen = rows_reached(Dataset.from_list(rows), config, 1, tokenizer)
    assert len(chosen) == 12 and long_prompt not in chosen["prompt"]
    assert len(set(chosen["prompt"])) == 12  # twelve different pairs, drawn with the run's seed
    assert chosen["prompt"] == rows_reached(Dataset.from_list(rows), config, 1, tokenizer)["prompt"]
    without = rows_reached(Dataset.from_list(rows), config, 1)  # no tokenizer: the old draw, long ones included
    assert long_prompt in without["prompt"]
