"""`preflab train …`: reward models, pair rankers, DPO, SimPO, RL against a reward model, and evaluation.

One command per training method (`preflab.training.methods.METHODS`), its options
generated from the method's config dataclass, so every field and its help text is
an option; `train eval`'s come from `preflab.training.evaluate.EvalConfig`. Under
`torchrun --nproc_per_node N -m preflab train …` every rank runs the same command;
only rank 0 opens the database and prints.
"""

from __future__ import annotations

import dataclasses

import click

from preflab.commands.options import build_config, config_options, echo_result, json_option, pass_settings
from preflab.commands.text import bench_text
from preflab.console import Reporter, plural
from preflab.settings import Settings
from preflab.training.evaluate import EvalConfig
from preflab.training.methods import METHODS, Method, train


def run_options(func):
    """What a training run needs besides its config: the starting model, the data, where it goes."""
    options = [
        click.option(
            "--model",
            "model_name",
            metavar="NAME",
            help="Starting model: a model version, embedded name, local path or hub id; default: the global --model.",
        ),
        click.option(
            "--dataset-version",
            metavar="NAME",
            help="Dataset version (name or id); default: the newest, exported first if the pairs changed since.",
        ),
        click.option(
            "--output-dir",
            type=click.Path(file_okay=False),
            help="Run folder (checkpoints, data, model); default: DATA_DIR/runs/KIND-ID.",
        ),
        click.option(
            "--resume",
            is_flag=True,
            help="Continue the newest unfinished run of this kind from its last checkpoint (with its stored config).",
        ),
        json_option,
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _heldout(metrics: dict) -> str:
    if "heldout_reward_policy" in metrics:  # RL: fresh samples scored by the reward model
        return (
            f"reward of fresh samples {metrics['heldout_reward_start']:.3f} → "
            f"{metrics['heldout_reward_policy']:.3f} on {metrics['heldout_prompts']:,} held-out prompts, "
            f"KL {metrics['heldout_kl']:.3f} ± {metrics['heldout_kl_stderr']:.3f} nats"
        )
    if "heldout_prompts" in metrics:
        return "no held-out prompts scored"
    if "heads" in metrics:  # a multi-objective reward model: each head on its own criterion's pairs
        return "held-out accuracy by head: " + ", ".join(
            f"{name} no pairs"
            if head["heldout_accuracy"] is None
            else f"{name} {head['heldout_accuracy']:.3f} on {head['heldout_pairs']:,} pairs"
            for name, head in metrics["heads"].items()
        )
    if "heldout_accuracy" in metrics:
        of = f" of criterion {metrics['criterion']}" if metrics.get("criterion") else ""
        return (
            "no test split"
            if metrics["heldout_accuracy"] is None
            else f"held-out accuracy {metrics['heldout_accuracy']:.3f} on {metrics['heldout_pairs']:,} pairs{of}"
        )
    return (
        "no test split"
        if metrics.get("heldout_reward_accuracy") is None
        else f"held-out implicit-reward accuracy {metrics['heldout_reward_accuracy']:.3f}, "
        f"margin {metrics['heldout_reward_margin']:.3f} on {metrics['heldout_pairs']:,} pairs"
    )


def _train(settings: Settings, method: str, config, model_name, dataset_version, output_dir, resume, as_json):
    from preflab.db.engine import open_sessions
    from preflab.training.runs import disk_note, is_main_process

    sessions = open_sessions(settings.database_url) if is_main_process() else None
    result = train(
        method,
        sessions,
        config,
        model_name or settings.model,
        dataset_version,
        resume,
        output_dir,
        reporter=Reporter(not as_json),
    )
    if result is None:  # not rank 0: the main process reports
        return
    echo_result(as_json, dataclasses.asdict(result), lambda: _trained_text(result, disk_note(result)))


def _trained_text(result, disk: str) -> str:
    """`reward run 4: 120 steps on prefs-3 …, loss 0.69 → 0.41; held-out accuracy …; saved …`."""
    m = result.metrics
    loss = "" if m.get("first_loss") is None else f", loss {m['first_loss']:.4f} → {m['last_loss']:.4f}"
    return (
        f"{result.kind} run {result.run_id}{' (resumed)' if result.resumed else ''}: "
        f"{plural(m['global_step'], 'step')} on {result.dataset_version} (world size {result.world_size})"
        f"{loss}; {_heldout(m)}; saved model version {result.model_version} to {result.path}; {disk}"
    )


@click.group("train")
def train_group():
    """Train reward models and DPO policies from the stored preferences.

    Example: preflab train reward --grouped --num-train-epochs 2
    """


def method_command(method: Method) -> click.Command:
    """`preflab train NAME`: the run's options, and one option per field of the method's config."""

    @run_options
    @config_options(method.config)
    @pass_settings
    def command(settings: Settings, model_name, dataset_version, output_dir, resume, as_json, **fields):
        _train(
            settings,
            method.name,
            build_config(method.config, fields),
            model_name,
            dataset_version,
            output_dir,
            resume,
            as_json,
        )

    return click.command(method.name, help=method.help)(command)


for _method in METHODS.values():
    train_group.add_command(method_command(_method))


@train_group.command("eval")
@click.argument("model_version", metavar="MODEL_VERSION")
@config_options(EvalConfig)
@json_option
@pass_settings
def eval_command(settings: Settings, model_version, as_json, **fields):
    """The reward-model bench of a reward model or pair ranker, or a policy's win rate against its base model.

    A reward model or pair ranker: accuracy on the dataset version's held-out pairs
    (strict, as RewardBench scores), with 95% bootstrap intervals, per category,
    annotator kind and margin, its length bias and position effects; --compare
    scores another version on the same pairs and gives the difference and p-value.

    Example: preflab train eval reward-3 --compare reward-2

    Example: preflab train eval policy-4 --judge reward-model --judge-model reward-3 --limit 100
    """
    from preflab.db.engine import open_sessions
    from preflab.training.evaluate import evaluate_model_version

    config = build_config(EvalConfig, fields)
    report = evaluate_model_version(
        open_sessions(settings.database_url, existing=True),
        model_version,
        config,
        settings.model,
        reporter=Reporter(not as_json),
    )
    echo_result(as_json, report, lambda: bench_text(report) if "bench" in report else _win_rate_text(report))


def _win_rate_text(report: dict) -> str:
    """A policy against its base model: its win rate, and by whose judgement."""
    return (
        f"{report['model_version']} vs {report['against']}: win rate {report['win_rate']:.3f} over "
        f"{report['prompts']:,} held-out prompts ({report['wins']} wins, {report['losses']} losses, "
        f"{report['ties']} ties; {report['judge']} judge {report['judge_model']})"
    )
