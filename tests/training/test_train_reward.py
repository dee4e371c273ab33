"""`preflab train reward`: TRL's pairwise RewardTrainer and preflab's grouped trainer, on real data."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from preflab.cli import cli
from preflab.db.models import DatasetVersion, ModelVersion, TrainingRun
from tests.toy_data import load_toy_rankings, one_thread, toy_base, toy_store  # noqa: F401 (fixtures)
from tests.training.step_lines import CLOCK, matches, stderr_is_a_log, step_line, step_lines  # noqa: F401

pytestmark = pytest.mark.slow

FAST = [
    "--max-steps",
    24,
    "--per-device-train-batch-size",
    8,
    "--learning-rate",
    3e-3,
    "--logging-steps",
    4,
    "--max-length",
    16,
    "--use-cpu",
    "--seed",
    0,
]
TWO_STEPS = ["--max-steps", 2, *FAST[2:]]
# Enough to learn by a margin: at FAST's rate the pairwise loss hovered at ln 2 (0.696 in the first four steps,
# 0.701 in the last four on one machine, lower on another), so a test of learning passed or failed by the CPU.
LEARNS = [
    "--max-steps",
    48,
    "--per-device-train-batch-size",
    8,
    "--learning-rate",
    1e-3,
    "--logging-steps",
    4,
    "--max-length",
    16,
    "--use-cpu",
    "--seed",
    0,
]


def run(url, *args, expect_ok=True):
    result = CliRunner().invoke(cli, ["--database-url", url, *map(str, args)], catch_exceptions=False)
    if expect_ok:
        assert result.exit_code == 0, result.output
    return result


def weight(path, name):
    from safetensors.torch import load_file

    return load_file(f"{path}/model.safetensors")[name]


def test_pairwise_run_records_run_dataset_and_model_version(db_url, toy_base, tmp_path, sessions):
    load_toy_rankings(sessions, toy_base, tmp_path / "toy")
    report = json.loads(run(db_url, "train", "reward", "--model", toy_base, *LEARNS, "--json").stdout)
    with sessions.begin() as session:
        (run_row,) = session.scalars(select(TrainingRun)).all()
        assert (run_row.kind, run_row.status, run_row.world_size, run_row.error) == ("reward", "succeeded", 1, None)
        assert run_row.config["learning_rate"] == 1e-3 and run_row.config["max_steps"] == 48
        assert run_row.config["grouped"] is False and run_row.base_model == str(toy_base)
        # No dataset version existed: the run exported one and trained on it.
        (dataset,) = session.scalars(select(DatasetVersion)).all()
        assert run_row.dataset_version_id == dataset.id and report["dataset_version"] == dataset.name
        version = session.get(ModelVersion, run_row.output_model_version_id)
        assert (version.kind, version.name, version.path) == (
            "reward",
            report["model_version"],
            run_row.output_path + "/model",
        )
        parent = session.get(ModelVersion, version.parent_id)
        assert (parent.kind, parent.path, version.base_model) == ("base", str(toy_base), str(toy_base))
        metrics = run_row.metrics
        assert metrics == version.metrics and metrics["global_step"] == 48
        # Seeds 0-3 here: 0.72 -> 0.55, 0.69 -> 0.49, 0.73 -> 0.49, 0.70 -> 0.60
        assert metrics["last_loss"] < metrics["first_loss"] - 0.05, metrics
        assert metrics["heldout_pairs"] == dataset.n_test > 0
    # The recorded held-out accuracy is the saved model's on the run's test split, pair by pair.
    from datasets import load_from_disk

    from preflab.lm.loading import load_sequence_scorer
    from preflab.lm.scoring import pairwise_accuracy, reward_scores

    data = load_from_disk(str(Path(report["path"]).parent / "data"))
    test = data["test"]
    model, tokenizer = load_sequence_scorer(report["path"])
    # Chosen replies now outscore rejected ones on the pairs it learned from (0.74-0.84 for seeds 0-3; chance 0.5).
    learned = pairwise_accuracy(model, tokenizer, data["train"])
    assert learned["accuracy"] > 0.65 and learned["mean_margin"] > 0, learned
    chosen = reward_scores(model, tokenizer, test["prompt"], test["chosen"])
    rejected = reward_scores(model, tokenizer, test["prompt"], test["rejected"])
    assert len(chosen) == metrics["heldout_pairs"]
    assert metrics["heldout_accuracy"] == pytest.approx(sum(c > r for c, r in zip(chosen, rejected)) / len(chosen))
    assert metrics["heldout_mean_margin"] == pytest.approx(
        sum(c - r for c, r in zip(chosen, rejected)) / len(chosen), abs=1e-4
    )
    # The backbone started from the base model's weights and moved.
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not weight(toy_base, name).equal(weight(report["path"], name))


def test_grouped_mode_learns_the_preference_and_matches_trl_loss(toy_store, toy_base):
    url, sessions = toy_store
    args = [
        "--max-steps",
        40,
        "--per-device-train-batch-size",
        4,
        "--learning-rate",
        3e-3,
        "--logging-steps",
        5,
        "--max-length",
        16,
        "--use-cpu",
        "--grouped",
    ]
    report = json.loads(run(url, "train", "reward", "--model", toy_base, *args, "--json").stdout)
    assert report["kind"] == "reward-grouped"
    metrics = report["metrics"]
    assert metrics["last_loss"] < metrics["first_loss"] and metrics["global_step"] == 40
    # Chosen responses now outscore rejected ones on the pairs it learned from (a random head scores ~0.5).
    from datasets import load_from_disk

    from preflab.lm.loading import load_sequence_scorer
    from preflab.lm.scoring import pairwise_accuracy

    model, tokenizer = load_sequence_scorer(report["path"])
    learned = pairwise_accuracy(model, tokenizer, load_from_disk(str(Path(report["path"]).parent / "data"))["train"])
    assert learned["accuracy"] > 0.7 and learned["mean_margin"] > 0, learned
    with sessions.begin() as session:
        assert session.scalar(select(TrainingRun.kind)) == "reward-grouped"
    # `train eval` on the saved model reproduces the recorded held-out accuracy.
    again = json.loads(run(url, "train", "eval", report["model_version"], "--json").stdout)
    assert again["heldout_accuracy"] == pytest.approx(metrics["heldout_accuracy"])


def test_grouped_loss_equals_trl_pairwise_loss_on_the_same_pairs(toy_base):
    """With equal pairs per prompt, the grouped loss is TRL's mean pair loss, from K passes instead of 2·C(K,2)."""
    import torch
    import torch.nn.functional as F
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from preflab.lm.scoring import sequence_ids
    from preflab.training.grouped import DataCollatorForGroups, grouped_loss, prepare_groups

    tokenizer = AutoTokenizer.from_pretrained(toy_base)
    model = AutoModelForSequenceClassification.from_pretrained(toy_base, num_labels=1).eval()
    model.config.pad_token_id = tokenizer.pad_token_id
    responses = {0: ["5 1 2 3", "7 7 8 9", "2 3 3 4", "9 0 1 1"], 1: ["4 4 5 6", "1 2 2 3", "8 9 9 0", "6 6 7 8"]}
    prompts = {0: "1 6 8 4 =", 1: "7 0 3 9 ="}
    rows = [
        {"prompt": prompts[p], "chosen": r[i], "rejected": r[j], "prompt_id": p, "margin": 1.0, "weight": 1.0}
        for p, r in responses.items()
        for i in range(4)
        for j in range(i + 1, 4)
    ]
    groups = prepare_groups(Dataset.from_list(rows), tokenizer, max_length=32)
    batch = DataCollatorForGroups(pad_token_id=tokenizer.pad_token_id)([groups[0], groups[1]])
    assert batch["input_ids"].shape[0] == 8 and batch["chosen_index"].shape[0] == 12  # 2 prompts × 4, 2 × C(4,2)
    with torch.no_grad():
        rewards = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.squeeze(-1)
        loss, _ = grouped_loss(rewards, batch)
        pairwise = []
        for row in rows:
            ids = [torch.tensor([sequence_ids(tokenizer, row["prompt"], row[side])]) for side in ("chosen", "rejected")]
            r_c, r_r = (model(input_ids=i).logits[0, 0] for i in ids)
            pairwise.append(-F.logsigmoid(r_c - r_r))
    assert loss.item() == pytest.approx(torch.stack(pairwise).mean().item(), abs=1e-5)


def test_a_crash_marks_the_run_failed_and_resume_continues_from_the_checkpoint(toy_store, toy_base):
    from transformers import TrainerCallback

    from preflab.errors import TrainingError
    from preflab.training.config import RewardTrainConfig
    from preflab.training.methods import train

    class PowerCut(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 6:
                raise RuntimeError("power cut")

    class Steps(TrainerCallback):
        taken = 0

        def on_step_end(self, args, state, control, **kwargs):
            Steps.taken += 1

    _, sessions = toy_store
    config = RewardTrainConfig(
        max_steps=10,
        save_steps=4,
        per_device_train_batch_size=8,
        learning_rate=3e-3,
        max_length=16,
        use_cpu=True,
        logging_steps=2,
    )
    with pytest.raises(TrainingError, match="power cut") as failure:
        train("reward", sessions, config, str(toy_base), callbacks=[PowerCut()])
    assert str(failure.value).startswith("training run 1 failed: RuntimeError: power cut")
    with sessions.begin() as session:
        failed = session.scalars(select(TrainingRun)).one()
        assert failed.status == "failed" and failed.error.startswith("RuntimeError: power cut")
        assert failed.output_model_version_id is None and failed.finished_at is not None

    result = train("reward", sessions, RewardTrainConfig(), "ignored on resume", resume=True, callbacks=[Steps()])
    assert result.run_id == failed.id and result.resumed
    assert Steps.taken == 6  # steps 5 … 10, after checkpoint-4
    assert result.metrics["global_step"] == 10
    with sessions.begin() as session:
        (done,) = session.scalars(select(TrainingRun)).all()
        assert done.status == "succeeded" and done.error is None and done.config["max_steps"] == 10
        assert session.scalar(select(func.count()).select_from(ModelVersion).where(ModelVersion.kind == "reward")) == 1

    with pytest.raises(Exception, match="no unfinished reward run to resume"):
        train("reward", sessions, config, str(toy_base), resume=True)


@pytest.mark.parametrize("window", ["copy_data", "prefer_reusable_attention"])
def test_a_signal_between_recording_the_run_and_training_marks_it_failed(toy_store, toy_base, monkeypatch, window):
    """SIGTERM lands where it lands: here as SystemExit (what `retrain`'s handler raises) while the run's data is
    copied, and between that and the first step. The retrain lock test once found a run left `running` so."""
    import preflab.lm.loading
    import preflab.training.runs
    from preflab.training.config import RewardTrainConfig
    from preflab.training.methods import train

    def terminated(*args, **kwargs):
        raise SystemExit(143)

    monkeypatch.setattr(preflab.training.runs if window == "copy_data" else preflab.lm.loading, window, terminated)
    _, sessions = toy_store
    with pytest.raises(SystemExit):
        train("reward", sessions, RewardTrainConfig(max_steps=1, use_cpu=True), str(toy_base))
    with sessions.begin() as session:
        (run,) = session.scalars(select(TrainingRun)).all()
        assert run.status == "failed" and run.error.startswith("SystemExit: 143") and run.finished_at is not None


def test_a_model_that_cannot_load_fails_the_run_with_one_line(toy_store):
    url, sessions = toy_store
    result = run(url, "train", "reward", "--model", "nobody/no-such-model", *FAST, expect_ok=False)
    assert result.exit_code == 1
    assert result.output.startswith("Error: training run 1 failed: ") and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    with sessions.begin() as session:
        failed = session.scalars(select(TrainingRun)).one()
        assert failed.status == "failed" and failed.error


def test_a_changed_pair_build_is_exported_before_training(toy_store, toy_base, tmp_path):
    url, sessions = toy_store
    run(url, "train", "reward", "--model", toy_base, *TWO_STEPS)
    run(url, "pairs", "build", "--strategy", "best-vs-rest")
    report = json.loads(run(url, "train", "reward", "--model", toy_base, *TWO_STEPS, "--json").stdout)
    with sessions.begin() as session:
        names = session.scalars(select(DatasetVersion.name).order_by(DatasetVersion.id)).all()
    assert len(names) == 2 and report["dataset_version"] == names[1]
    # Naming an older version trains on it, without a new export.
    report = json.loads(
        run(url, "train", "reward", "--model", toy_base, *TWO_STEPS, "--dataset-version", names[0], "--json").stdout
    )
    assert report["dataset_version"] == names[0]
    with sessions.begin() as session:
        assert session.scalar(select(func.count()).select_from(DatasetVersion)) == 2


def test_bad_options_are_one_sentence(toy_store):
    url, _ = toy_store
    result = run(url, "train", "reward", "--learning-rate", "-1", expect_ok=False)
    assert result.exit_code == 1 and result.output.strip() == "Error: --learning-rate must be positive, got -1.0"
    result = run(url, "train", "reward", "--dataset-version", "nope", expect_ok=False)
    assert result.exit_code == 1 and "there is no dataset version 'nope'" in result.output


def test_lora_reward_model_is_saved_merged_with_its_trained_head(toy_store, toy_base):
    from safetensors.torch import load_file

    url, _ = toy_store
    report = json.loads(
        run(url, "train", "reward", "--model", toy_base, *LEARNS, "--lora", "--lora-r", 4, "--json").stdout
    )
    assert (Path(report["path"]).parent / "adapter" / "adapter_config.json").is_file()
    merged = load_file(f"{report['path']}/model.safetensors")
    assert not any("lora" in name for name in merged) and "score.weight" in merged
    # Seeds 0-3 here: 0.70 -> 0.60, 0.69 -> 0.57, 0.69 -> 0.62, 0.70 -> 0.60 (at FAST's rate, 0.698 -> 0.688)
    assert report["metrics"]["last_loss"] < report["metrics"]["first_loss"] - 0.05, report["metrics"]
    # The recorded held-out accuracy was measured on the merged model, which `train eval` reloads.
    again = json.loads(run(url, "train", "eval", report["model_version"], "--json").stdout)
    assert again["heldout_accuracy"] == pytest.approx(report["metrics"]["heldout_accuracy"])


@pytest.mark.usefixtures("stderr_is_a_log")
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_run_whose_stderr_is_a_log_file_says_its_progress_at_each_logging_step(toy_store, toy_base, as_json):
    # A bar shows nothing in a log file: `train reward` under a scheduler was silent for 8½ minutes.
    # `--json > out.json 2> log`, the usual unattended way, said nothing either.
    url, _ = toy_store
    result = run(
        url,
        "train",
        "reward",
        "--model",
        toy_base,
        "--max-steps",
        8,
        *FAST[2:],  # logs every 4 steps
        *(["--json"] if as_json else []),
    )
    lines = step_lines(result.stderr, "reward run 1")
    assert lines[0] == "training reward run 1: 8 steps"
    assert matches(step_line("reward run 1", 4, 8), lines[1])
    assert matches(step_line("reward run 1", 8, 8, left="0s"), lines[2])
    assert len(lines) == 3
    if as_json:  # stdout stays one JSON document
        assert json.loads(result.stdout)["metrics"]["global_step"] == 8
    else:
        assert result.stdout.startswith("reward run 1: 8 steps on ")  # stdout holds the summary alone
        assert len(result.stdout.splitlines()) == 1


@pytest.mark.parametrize("seconds", [0, 42, 59.4, 59.6, 65, 599, 3599, 3600, 7325, 360_000])
def test_the_step_lines_pattern_takes_every_time_clock_prints(seconds):
    # A step of 65 s prints `1m 05s elapsed`, which `\d+s elapsed` refused.
    from preflab.training.progress import clock

    assert matches(CLOCK, clock(seconds))
    assert matches(
        step_line("dpo run 2", 1, 10),
        f"training dpo run 2: step 1/10, loss 0.6931, {clock(seconds)} elapsed, about {clock(seconds * 9)} left",
    )
