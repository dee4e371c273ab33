"""`train rl`: RLOO (or GRPO) against a reward model on the digit world, recorded with its lineage."""

import json

import numpy as np
import pytest
from click.testing import CliRunner
from sqlalchemy import select

from preflab.cli import cli
from preflab.db.models import ModelVersion, Prompt, TrainingRun
from preflab.errors import ConfigError, TrainingError
from tests.toy_data import one_thread, toy_base, toy_store  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slow


def fast(**overrides):
    from preflab.training.rl import RLTrainConfig

    values = {
        "reward_model": "reward-1",
        "learning_rate": 1e-3,
        "max_steps": 16,
        "per_device_train_batch_size": 16,
        "n": 4,
        "max_new_tokens": 5,
        "max_length": 16,
        "use_cpu": True,
        "logging_steps": 4,
        "save_steps": 10_000,
        "eval_prompts": 8,
        "beta": 0.05,
    }
    return RLTrainConfig(**{**values, **overrides})


def rank_by_first_digit(sessions, base, workdir, prompts: int = 200) -> int:
    """Import an annotator's rankings of base samples that prefers a larger first output digit; build pairs.

    A preference on one position, which a reward model on the weakly trained test
    base learns in a few dozen steps (the toy's own compares two positions).
    """
    from transformers import AutoModelForCausalLM

    from preflab.db.ingest.jsonl import import_file, import_rankings_batch
    from preflab.db.pairs.build import build_pairs
    from preflab.training.demos import toy_world as toy
    from preflab.training.goodhart.world import sample_prompts

    workdir.mkdir(parents=True, exist_ok=True)
    chosen = sample_prompts(prompts, seed=0)
    outputs = toy.sample_outputs(AutoModelForCausalLM.from_pretrained(base), chosen, 4, seed=0)
    with (workdir / "rankings.jsonl").open("w") as handle:
        for i, (prompt, group) in enumerate(zip(chosen, outputs)):
            distinct = list(dict.fromkeys(tuple(o) for o in group if o))
            levels = sorted({o[0] for o in distinct}, reverse=True)
            if len(levels) < 2:
                continue
            tiers = [[j for j, o in enumerate(distinct) if o[0] == level] for level in levels]
            handle.write(
                json.dumps(
                    {
                        "prompt": toy.prompt_text(prompt),
                        "ranking": tiers,
                        "id": f"first-{i}",
                        "responses": [toy.completion_text(o) for o in distinct],
                        "annotator": "high-first-digit",
                        "annotator_kind": "human",
                    }
                )
                + "\n"
            )
    import_file(sessions, workdir / "rankings.jsonl", import_rankings_batch)
    with sessions.begin() as session:
        return build_pairs(session).pairs


@pytest.fixture
def rewarded(sqlite_url, toy_base, tmp_path):
    """A fresh store with rankings that prefer a larger first digit, and a reward model (`reward-1`) on them."""
    from preflab.db.engine import open_database, session_factory
    from preflab.training.config import RewardTrainConfig
    from preflab.training.methods import train

    sessions = session_factory(open_database(sqlite_url))
    rank_by_first_digit(sessions, toy_base, tmp_path / "toy")
    config = RewardTrainConfig(
        learning_rate=1e-2,
        max_steps=60,
        per_device_train_batch_size=16,
        max_length=16,
        use_cpu=True,
        logging_steps=10,
        save_steps=10_000,
    )
    reward = train("reward", sessions, config, str(toy_base))
    assert reward.model_version == "reward-1" and reward.metrics["heldout_accuracy"] >= 0.8, reward.metrics
    return sessions, reward


def exact_kl(policy_path, base_path, prompts) -> float:
    """KL(policy ‖ base) over the four output digits, summed exactly over all 10⁴ outputs."""
    from transformers import AutoModelForCausalLM

    from preflab.training.goodhart.world import log_probs

    logp = log_probs(AutoModelForCausalLM.from_pretrained(policy_path), prompts)
    ref = log_probs(AutoModelForCausalLM.from_pretrained(base_path), prompts)
    return float(np.mean((np.exp(logp) * (logp - ref)).sum(axis=1)))


def test_rl_raises_the_reward_of_fresh_samples_and_records_the_lineage(rewarded, toy_base):
    from preflab.training.methods import train

    sessions, reward = rewarded
    result = train("rl", sessions, fast(eval_prompts=20), str(toy_base))
    m = result.metrics
    # Fresh samples on held-out prompts: the trained policy's score more than the start's.
    assert m["heldout_prompts"] > 0
    noise = (m["heldout_reward_policy_stderr"] ** 2 + m["heldout_reward_start_stderr"] ** 2) ** 0.5
    assert m["heldout_reward_gain"] > 3 * noise, m
    assert m["heldout_kl"] > 0 and m["heldout_kl_stderr"] >= 0
    # Mean reward, KL and entropy over training, as TRL logged them every 4 steps.
    assert [row["step"] for row in m["history"]] == [4, 8, 12, 16]
    assert all({"reward", "kl", "entropy"} <= set(row) for row in m["history"])
    assert m["train_reward_last"] > m["train_reward_first"] and m["global_step"] == 16
    with sessions.begin() as session:
        run = session.get(TrainingRun, result.run_id)
        assert (run.kind, run.status, run.config["beta"], run.config["algorithm"]) == ("rl", "succeeded", 0.05, "rloo")
        assert run.config["reward_model"] == reward.path  # where every rank (and --resume) loads it from
        policy = session.get(ModelVersion, run.output_model_version_id)
        assert (policy.kind, policy.name, policy.path) == ("policy", result.model_version, result.path)
        assert session.get(ModelVersion, policy.parent_id).path == str(toy_base)
        assert policy.metrics["reward_model_version"] == "reward-1"
        assert policy.metrics["reward_model_version_id"] == reward.model_version_id
        assert policy.metrics["beta"] == 0.05


def test_a_larger_beta_keeps_the_policy_closer_to_the_base(rewarded, toy_base):
    from preflab.training.goodhart.world import sample_prompts
    from preflab.training.methods import train

    sessions, _ = rewarded
    prompts = sample_prompts(24, seed=7)
    kls = {}
    # Over 24 steps the KL is not monotone in small betas (with transformers 5.23 and TRL 1.16.0:
    # 1.96 at beta 0, 1.37 at 0.3, 1.60 at 1.0, 0.67 at 3.0), so the penalty compared is a clear one.
    for beta in (0.0, 3.0):
        result = train("rl", sessions, fast(beta=beta, eval_prompts=0, max_steps=24), str(toy_base))
        kls[beta] = exact_kl(result.path, toy_base, prompts)
    assert kls[0.0] > 1.5 * kls[3.0] > 0, kls


def test_train_rl_command_runs_grpo_on_a_prompts_file_with_lora(rewarded, toy_base, tmp_path, sqlite_url):
    from safetensors.torch import load_file

    from preflab.training.demos.toy_world import prompt_text
    from preflab.training.goodhart.world import sample_prompts

    sessions, _ = rewarded
    path = tmp_path / "prompts.jsonl"
    texts = [prompt_text(p) for p in sample_prompts(12, seed=99)]
    path.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in texts) + "not json\n")
    args = [
        "--database-url",
        sqlite_url,
        "train",
        "rl",
        "--model",
        str(toy_base),
        "--reward-model",
        "reward-1",
        "--algorithm",
        "grpo",
        "--prompts-file",
        str(path),
        "--lora",
        "--lora-r",
        "4",
        "--max-steps",
        "4",
        "--per-device-train-batch-size",
        "16",
        "--n",
        "4",
        "--max-new-tokens",
        "5",
        "--max-length",
        "16",
        "--learning-rate",
        "1e-3",
        "--logging-steps",
        "4",
        "--eval-prompts",
        "4",
        "--use-cpu",
    ]
    result = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    m = report["metrics"]
    assert report["kind"] == "rl" and m["algorithm"] == "grpo" and m["beta"] == 0.0  # GRPO's default: no KL
    assert m["global_step"] == 4 and len(m["history"]) == 1 and m["heldout_prompts"] == 4
    merged, base = load_file(f"{report['path']}/model.safetensors"), load_file(f"{toy_base}/model.safetensors")
    assert set(merged) == set(base)  # LoRA merged into plain weights
    assert not merged["model.layers.0.self_attn.q_proj.weight"].equal(base["model.layers.0.self_attn.q_proj.weight"])
    with sessions.begin() as session:
        stored = set(session.scalars(select(Prompt.text).where(Prompt.text.in_(texts))))
        assert stored == set(texts)  # the file's prompts are in the store (its bad line quarantined)
    text = CliRunner().invoke(cli, [*args, "--max-steps", "2", "--logging-steps", "2"], catch_exceptions=False).output
    assert "rl run " in text and "reward of fresh samples" in text and "KL" in text


def test_a_crashed_rl_run_resumes_from_its_checkpoint(rewarded, toy_base):
    from transformers import TrainerCallback

    from preflab.training.methods import train
    from preflab.training.rl import RLTrainConfig

    class PowerCut(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 5:
                raise RuntimeError("power cut")

    sessions, _ = rewarded
    with pytest.raises(TrainingError, match="power cut"):
        train("rl", sessions, fast(max_steps=8, save_steps=4, eval_prompts=0), str(toy_base), callbacks=[PowerCut()])
    result = train("rl", sessions, RLTrainConfig(), "ignored on resume", resume=True)
    assert result.resumed and result.metrics["global_step"] == 8
    assert result.metrics["reward_model_version"] == "reward-1"  # the lineage survives the resume
    with sessions.begin() as session:
        runs = session.scalars(select(TrainingRun).where(TrainingRun.kind == "rl")).all()
        assert [(r.status, r.config["max_steps"]) for r in runs] == [("succeeded", 8)]


def test_rl_options_are_checked_before_anything_runs(toy_store, toy_base):
    from preflab.training.methods import train
    from preflab.training.rl import RLTrainConfig

    for overrides, message in (
        ({"n": 1}, "--n must be at least 2"),
        ({"n": 3, "per_device_train_batch_size": 8}, "must be a multiple of --n"),
        ({"beta": -0.1}, "--beta cannot be negative"),
        ({"algorithm": "ppo"}, "unknown --algorithm 'ppo'"),
        ({"max_new_tokens": 64, "max_length": 32}, "leaves no room for a prompt"),
    ):
        with pytest.raises(ConfigError, match=message):
            RLTrainConfig(**overrides)
    assert RLTrainConfig(algorithm="grpo").beta == 0.0 and RLTrainConfig().beta == 0.05
    _, sessions = toy_store
    with pytest.raises(ConfigError, match="--reward-model"):
        train("rl", sessions, RLTrainConfig(), str(toy_base))
    with sessions.begin() as session:
        assert session.scalars(select(TrainingRun)).all() == []


def test_rl_under_torchrun_trains_on_two_processes_and_records_one_run(rewarded, toy_base, sqlite_url, tmp_path):
    import os
    import subprocess
    import sys

    sessions, _ = rewarded
    env = dict(os.environ, OMP_NUM_THREADS="1", PREFLAB_HOME=str(tmp_path / "home"), HF_HUB_OFFLINE="1")
    args = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "preflab",
        "--database-url",
        sqlite_url,
        "train",
        "rl",
        "--model",
        toy_base,
        "--reward-model",
        "reward-1",
        "--max-steps",
        4,
        "--per-device-train-batch-size",
        8,
        "--num-generations",
        4,
        "--max-new-tokens",
        5,
        "--max-length",
        16,
        "--learning-rate",
        1e-3,
        "--logging-steps",
        2,
        "--eval-prompts",
        4,
        "--use-cpu",
        "--json",
    ]
    done = subprocess.run(list(map(str, args)), capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout[done.stdout.index("{") :])  # rank 0 alone prints
    assert report["world_size"] == 2 and report["metrics"]["world_size"] == 2 and report["metrics"]["global_step"] == 4
    with sessions.begin() as session:
        runs = session.scalars(select(TrainingRun).where(TrainingRun.kind == "rl")).all()
        assert [(r.status, r.world_size) for r in runs] == [("succeeded", 2)]
