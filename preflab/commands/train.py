"""`preflab train …`: reward models, pair rankers, DPO, SimPO, RL against a reward model, and evaluation.

The options are generated from the config dataclasses (`preflab.training.config`,
`preflab.training.evaluate.EvalConfig`), so every field and its help text is an
option. Under `torchrun --nproc_per_node N -m preflab train …` every rank runs
the same command; only rank 0 opens the database and prints.
"""

from __future__ import annotations

import dataclasses

import click

from preflab.console import Reporter, build_config, config_options, echo_json, json_option, pass_settings, plural
from preflab.settings import Settings
from preflab.training.config import DPOTrainConfig, RewardTrainConfig
from preflab.training.evaluate import EvalConfig
from preflab.training.pair_ranker import PairRankerTrainConfig
from preflab.training.rl import RLTrainConfig
from preflab.training.simpo import SimPOTrainConfig


def run_options(func):
    """What a training run needs besides its config: the starting model, the data, where it goes."""
    options = [
        click.option("--model", "model_name", metavar="NAME",
                     help="Starting model: a model version, embedded name, local path or hub id; "
                          "default: the global --model."),
        click.option("--dataset-version", metavar="NAME", help="Dataset version (name or id); default: the newest, "
                                                               "exported first if the pairs changed since."),
        click.option("--output-dir", type=click.Path(file_okay=False),
                     help="Run folder (checkpoints, data, model); default: DATA_DIR/runs/KIND-ID."),
        click.option("--resume", is_flag=True,
                     help="Continue the newest unfinished run of this kind from its last checkpoint "
                          "(with its stored config)."),
        json_option,
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _heldout(metrics: dict) -> str:
    if "heldout_reward_policy" in metrics:  # RL: fresh samples scored by the reward model
        return (f"reward of fresh samples {metrics['heldout_reward_start']:.3f} → "
                f"{metrics['heldout_reward_policy']:.3f} on {metrics['heldout_prompts']:,} held-out prompts, "
                f"KL {metrics['heldout_kl']:.3f} ± {metrics['heldout_kl_stderr']:.3f} nats")
    if "heldout_prompts" in metrics:
        return "no held-out prompts scored"
    if "heldout_accuracy" in metrics:
        return ("no test split" if metrics["heldout_accuracy"] is None else
                f"held-out accuracy {metrics['heldout_accuracy']:.3f} on {metrics['heldout_pairs']:,} pairs")
    return ("no test split" if metrics.get("heldout_reward_accuracy") is None else
            f"held-out implicit-reward accuracy {metrics['heldout_reward_accuracy']:.3f}, "
            f"margin {metrics['heldout_reward_margin']:.3f} on {metrics['heldout_pairs']:,} pairs")


def _train(settings: Settings, train, config, model_name, dataset_version, output_dir, resume, as_json):
    from preflab.db.engine import open_sessions
    from preflab.training.runs import disk_note, is_main_process

    sessions = open_sessions(settings.database_url) if is_main_process() else None
    result = train(sessions, config, model_name or settings.model, dataset_version, resume, output_dir,
                   reporter=Reporter(not as_json))
    if result is None:  # not rank 0: the main process reports
        return
    if as_json:
        echo_json(dataclasses.asdict(result))
        return
    m = result.metrics
    loss = "" if m.get("first_loss") is None else f", loss {m['first_loss']:.4f} → {m['last_loss']:.4f}"
    click.echo(f"{result.kind} run {result.run_id}{' (resumed)' if result.resumed else ''}: "
               f"{plural(m['global_step'], 'step')} on {result.dataset_version} (world size {result.world_size})"
               f"{loss}; {_heldout(m)}; saved model version {result.model_version} to {result.path}; "
               f"{disk_note(result)}")


@click.group("train")
def train_group():
    """Train reward models and DPO policies from the stored preferences.

    Example: preflab train reward --grouped --num-train-epochs 2
    """


@train_group.command("reward")
@run_options
@config_options(RewardTrainConfig)
@pass_settings
def reward_command(settings: Settings, model_name, dataset_version, output_dir, resume, as_json, **fields):
    """Train a Bradley–Terry reward model (TRL's RewardTrainer, or --grouped) and record it.

    Example: preflab train reward --model smollm2-135m-instruct --grouped --use-margin
    """
    from preflab.training.reward import train_reward

    _train(settings, train_reward, build_config(RewardTrainConfig, fields), model_name, dataset_version, output_dir,
           resume, as_json)


@train_group.command("dpo")
@run_options
@config_options(DPOTrainConfig)
@pass_settings
def dpo_command(settings: Settings, model_name, dataset_version, output_dir, resume, as_json, **fields):
    """Train a policy with DPO (TRL's DPOTrainer) from a base model or model version, and record it.

    Example: preflab train dpo --model policy-3 --beta 0.1 --lora --learning-rate 5e-6
    """
    from preflab.training.dpo import train_dpo

    _train(settings, train_dpo, build_config(DPOTrainConfig, fields), model_name, dataset_version, output_dir,
           resume, as_json)


@train_group.command("simpo")
@run_options
@config_options(SimPOTrainConfig)
@pass_settings
def simpo_command(settings: Settings, model_name, dataset_version, output_dir, resume, as_json, **fields):
    """Train a policy with SimPO (TRL's CPO trainer, loss simpo): no reference model, and record it.

    Example: preflab train simpo --model policy-3 --beta 2.0 --simpo-gamma 0.5 --learning-rate 5e-7
    """
    from preflab.training.simpo import train_simpo

    _train(settings, train_simpo, build_config(SimPOTrainConfig, fields), model_name, dataset_version, output_dir,
           resume, as_json)


@train_group.command("rl")
@run_options
@config_options(RLTrainConfig)
@pass_settings
def rl_command(settings: Settings, model_name, dataset_version, output_dir, resume, as_json, **fields):
    """Optimise a policy against a reward model with RL (TRL's RLOOTrainer, or GRPO), and record it.

    The reward is R_RM − β·KL(π‖π_ref); prompts are the dataset version's training
    prompts (or --prompts-file's). TRL 1.x has no PPO trainer: RLOO is the critic-free
    PPO of the minimal-RLHF notebook, with a leave-one-out baseline.

    Example: preflab train rl --model policy-3 --reward-model reward-2 --beta 0.05 --max-steps 200
    """
    from preflab.training.rl import train_rl

    _train(settings, train_rl, build_config(RLTrainConfig, fields), model_name, dataset_version, output_dir,
           resume, as_json)


@train_group.command("pair-ranker")
@run_options
@config_options(PairRankerTrainConfig)
@pass_settings
def pair_ranker_command(settings: Settings, model_name, dataset_version, output_dir, resume, as_json, **fields):
    """Train a pairwise ranker (PairRM-style: reads the prompt and both responses at once) and record it.

    Trained on each comparison in both orders; P(A ≻ B) = σ(s(A,B) − s(B,A)), so
    P(A ≻ B) = 1 − P(B ≻ A). Judge with it: `preflab judge pair-ranker VERSION`.

    Example: preflab train pair-ranker --model smollm2-135m-instruct --learning-rate 2e-5 --num-train-epochs 2
    """
    from preflab.training.pair_ranker import train_pair_ranker

    _train(settings, train_pair_ranker, build_config(PairRankerTrainConfig, fields), model_name, dataset_version,
           output_dir, resume, as_json)


@train_group.command("eval")
@click.argument("model_version", metavar="MODEL_VERSION")
@config_options(EvalConfig)
@json_option
@pass_settings
def eval_command(settings: Settings, model_version, as_json, **fields):
    """Held-out accuracy of a reward model, or a policy's win rate against its base model.

    Example: preflab train eval policy-4 --judge reward-model --judge-model reward-3 --limit 100
    """
    from preflab.db.engine import open_sessions
    from preflab.training.evaluate import evaluate_model_version

    config = build_config(EvalConfig, fields)
    report = evaluate_model_version(open_sessions(settings.database_url, existing=True), model_version, config,
                                    settings.model, reporter=Reporter(not as_json))
    if as_json:
        echo_json(report)
    elif "heldout_accuracy" in report:
        confidence = (f"mean reward gap {report['heldout_mean_margin']:.3f}" if "heldout_mean_margin" in report else
                      f"mean P(chosen ≻ rejected) {report['heldout_mean_probability']:.3f}")  # a pair ranker
        click.echo(f"{report['model_version']}: held-out accuracy {report['heldout_accuracy']:.3f} on "
                   f"{report['heldout_pairs']:,} pairs of {report['dataset_version']} ({confidence})")
    else:
        click.echo(f"{report['model_version']} vs {report['against']}: win rate {report['win_rate']:.3f} over "
                   f"{report['prompts']:,} held-out prompts ({report['wins']} wins, {report['losses']} losses, "
                   f"{report['ties']} ties; {report['judge']} judge {report['judge_model']})")
