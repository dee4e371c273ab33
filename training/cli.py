"""`preflab train …`: reward models, DPO and evaluation of the results.

The training options are generated from the config dataclasses
(`preflab.training.config`), so every field and its help text is an option.
Under `torchrun --nproc_per_node N -m preflab train …` every rank runs the same
command; only rank 0 opens the database and prints.
"""

from __future__ import annotations

import dataclasses
import types
import typing

import click

from preflab.console import echo_json, pass_settings
from preflab.settings import Settings
from preflab.training.config import DPOTrainConfig, RewardTrainConfig

CLICK_TYPES = {int: click.INT, float: click.FLOAT, str: click.STRING}


def config_options(config_cls):
    """Add one click option per field of a config dataclass (`--field-name`, with its help)."""
    hints = typing.get_type_hints(config_cls)

    def decorate(func):
        for f in reversed(dataclasses.fields(config_cls)):
            hint = hints[f.name]
            args = [a for a in typing.get_args(hint) if a is not type(None)] \
                if isinstance(hint, types.UnionType) else [hint]
            base = args[0]
            flag = "--" + f.name.replace("_", "-")
            kwargs = {"default": f.default, "help": f.metadata.get("help"), "show_default": f.default is not None}
            if base is bool:
                func = click.option(f"{flag}/--no-{flag[2:]}", f.name, **kwargs)(func)
                continue
            kind = click.Choice(f.metadata["choices"]) if "choices" in f.metadata else CLICK_TYPES[base]
            func = click.option(flag, f.name, type=kind, **kwargs)(func)
        return func

    return decorate


def run_options(func):
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
        click.option("--json", "as_json", is_flag=True, help="Print the run as JSON."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _train(settings: Settings, train, config, model_name, dataset_version, output_dir, resume, as_json):
    from preflab.db.engine import open_sessions
    from preflab.training.runs import is_main_process

    sessions = open_sessions(settings.database_url) if is_main_process() else None
    result = train(sessions, config, model_name or settings.model, dataset_version, resume, output_dir,
                   progress=not as_json)
    if result is None:  # not rank 0: the main process reports
        return
    if as_json:
        echo_json(dataclasses.asdict(result))
        return
    m = result.metrics
    if "heldout_accuracy" in m:
        heldout = ("no test split" if m["heldout_accuracy"] is None else
                   f"held-out accuracy {m['heldout_accuracy']:.3f} on {m['heldout_pairs']:,} pairs")
    else:
        heldout = ("no test split" if m.get("heldout_reward_accuracy") is None else
                   f"held-out implicit-reward accuracy {m['heldout_reward_accuracy']:.3f}, "
                   f"margin {m['heldout_reward_margin']:.3f} on {m['heldout_pairs']:,} pairs")
    loss = "" if m.get("first_loss") is None else f", loss {m['first_loss']:.4f} → {m['last_loss']:.4f}"
    click.echo(f"{result.kind} run {result.run_id}{' (resumed)' if result.resumed else ''}: "
               f"{m['global_step']:,} steps on {result.dataset_version} (world size {result.world_size}){loss}; "
               f"{heldout}; saved model version {result.model_version} to {result.path}")


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

    _train(settings, train_reward, RewardTrainConfig(**fields), model_name, dataset_version, output_dir, resume,
           as_json)


@train_group.command("dpo")
@run_options
@config_options(DPOTrainConfig)
@pass_settings
def dpo_command(settings: Settings, model_name, dataset_version, output_dir, resume, as_json, **fields):
    """Train a policy with DPO (TRL's DPOTrainer) from a base model or model version, and record it.

    Example: preflab train dpo --model policy-3 --beta 0.1 --lora --learning-rate 5e-6
    """
    from preflab.training.dpo import train_dpo

    _train(settings, train_dpo, DPOTrainConfig(**fields), model_name, dataset_version, output_dir, resume, as_json)


@train_group.command("eval")
@click.argument("model_version", metavar="MODEL_VERSION")
@click.option("--dataset-version", metavar="NAME",
              help="Reward models: the dataset version whose test split to use (default: the one trained on).")
@click.option("--judge", "judge_kind", type=click.Choice(["pairwise", "score", "reward-model", "likelihood"]),
              default="pairwise", show_default=True, help="Policies: the judge that compares the two answers.")
@click.option("--judge-model", metavar="NAME",
              help="Policies: the judge's model (a reward model version for reward-model); default: the global --model.")
@click.option("--against", metavar="NAME", help="Policies: compare with this model instead of the parent.")
@click.option("--limit", type=int, help="Policies: at most this many held-out prompts.")
@click.option("--max-new-tokens", type=int, default=128, show_default=True, help="Policies: longest answer.")
@click.option("--sample", is_flag=True, help="Policies: sample answers (temperature 0.7) instead of greedy decoding.")
@click.option("--seed", type=int, default=0, show_default=True, help="Policies: sampling seed.")
@click.option("--batch-size", type=int, default=8, show_default=True, help="Sequences per forward pass.")
@click.option("--json", "as_json", is_flag=True, help="Print the evaluation as JSON.")
@pass_settings
def eval_command(settings: Settings, model_version, dataset_version, judge_kind, judge_model, against, limit,
                 max_new_tokens, sample, seed, batch_size, as_json):
    """Held-out accuracy of a reward model, or a policy's win rate against its base model.

    Example: preflab train eval policy-4 --judge reward-model --judge-model reward-3 --limit 100
    """
    from preflab.db.engine import open_sessions
    from preflab.training import evaluate as ev

    sessions = open_sessions(settings.database_url)
    with sessions.begin() as session:
        version = ev.find_model_version(session, model_version)
        kind, name = version.kind, version.name
        if kind == "reward":
            report = ev.evaluate_reward_version(session, version, dataset_version, batch_size)
        else:
            plan = ev.plan_policy_eval(session, version, against, limit)
            judge_label, judge_at = ev.judge_location(session, judge_kind, judge_model or settings.model)
    if kind != "reward":
        judge = ev.load_judge(judge_kind, judge_at, batch_size)
        report = ev.win_rate(plan, judge, max_new_tokens, sample, seed, batch_size)
        report |= {"judge": judge_kind, "judge_model": judge_label}
    with sessions.begin() as session:
        row = ev.find_model_version(session, name)
        row.metrics = {**(row.metrics or {}), "eval": report}
    if as_json:
        echo_json(report)
    elif kind == "reward":
        click.echo(f"{name}: held-out accuracy {report['heldout_accuracy']:.3f} on {report['heldout_pairs']:,} pairs "
                   f"of {report['dataset_version']} (mean reward gap {report['heldout_mean_margin']:.3f})")
    else:
        click.echo(f"{name} vs {report['against']}: win rate {report['win_rate']:.3f} over {report['prompts']:,} "
                   f"held-out prompts ({report['wins']} wins, {report['losses']} losses, {report['ties']} ties; "
                   f"{judge_kind} judge {report['judge_model']})")
