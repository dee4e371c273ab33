"""The root `preflab` command group.

This is the app shell: it builds the settings and names each concern's command
group. The groups live in `preflab.commands`, one module per group
(`preflab.commands.store`, `preflab.commands.train`, …), and are imported only when
used, so `preflab --help` never imports torch, transformers or datasets.
"""

from __future__ import annotations

import os

import click

from preflab import __version__
from preflab.commands.options import LazyGroup, log_to_stderr
from preflab.settings import DEFAULT_MODEL, Settings, default_database_url

# name -> "module:attribute"; each entry is one concern.
COMMANDS: dict[str, str] = {
    "db": "preflab.commands.store:db_group",
    "import": "preflab.commands.imports:import_group",
    "quarantine": "preflab.commands.store:quarantine_group",
    "pairs": "preflab.commands.export:pairs_group",
    "stats": "preflab.commands.store:stats_command",
    "annotators": "preflab.commands.store:annotators_command",
    "export": "preflab.commands.export:export_command",
    "pipeline": "preflab.commands.generate:pipeline_command",
    "generate": "preflab.commands.generate:generate_command",
    "judge": "preflab.commands.judge:judge_group",
    "ls": "preflab.commands.ls:ls_group",
    "demo": "preflab.commands.demo:demo_group",
    "bon": "preflab.commands.bon:bon_group",
    "train": "preflab.commands.train:train_group",
    "self-reward": "preflab.commands.self_reward:self_reward_group",
    "retrain": "preflab.commands.retrain:retrain_command",
    "schedule": "preflab.commands.retrain:schedule_command",
    "leaderboard": "preflab.commands.leaderboard:leaderboard_command",
    "report": "preflab.commands.report:page_command",
    "serve": "preflab.commands.serve:serve_command",
}

# One-line help for each lazy command, so `preflab --help` lists them without importing.
SUMMARIES: dict[str, str] = {
    "db": "Create and migrate the database.",
    "import": "Import rankings, prompts or a public preference dataset.",
    "quarantine": "Inspect records that could not be parsed.",
    "pairs": "Expand rankings into pairwise comparisons.",
    "stats": "Counts and inter-annotator agreement.",
    "annotators": "Annotator quality: agreement with gold and with the others, untouched orders, time per task.",
    "export": "Export comparisons as a Hugging Face dataset.",
    "pipeline": "Run the main job end to end on the configured database and model.",
    "generate": "Sample N candidate responses per prompt with a causal LM.",
    "judge": "Rank candidates with AI judges and report how far to trust them.",
    "ls": "Label Studio: projects, tasks, AI predictions and annotation sync.",
    "demo": "Self-contained demonstrations with a known answer.",
    "bon": "Best-of-n analysis: how far the policy moved (KL) and whether the true reward followed.",
    "train": "Train reward models and DPO policies from the stored preferences.",
    "self-reward": "Self-rewarding iterative DPO: M_t writes prompts, samples, judges itself, and DPO gives M_{t+1}.",
    "retrain": 'Retrain on the new comparisons if at least --min-new arrived; else say "nothing to do" (exit 0).',
    "schedule": "Run `preflab retrain` on a cron schedule until stopped, logging each run.",
    "leaderboard": "Rate the models whose replies were ranked: Bradley–Terry ratings with 95% intervals.",
    "report": "Write one self-contained HTML page: data, agreement, judges, leaderboard, models, optimisation.",
    "serve": "Serve Label Studio live: predictions, annotations as they are submitted, retraining on arrival.",
}


def _empty_is_unset(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An option given empty (`--model ""`) counts as not given: its environment variable, else its default."""
    if value == "":
        default = param.get_default(ctx)
        return os.environ.get(param.envvar) or (default() if callable(default) else default)
    return value


@click.group(cls=LazyGroup, lazy=COMMANDS, summaries=SUMMARIES)
@click.version_option(__version__, prog_name="preflab")
# Each option: the command line, else its environment variable, else its default; click alone reads them.
@click.option(
    "--database-url",
    envvar="PREFLAB_DATABASE_URL",
    default=default_database_url,
    metavar="URL",
    callback=_empty_is_unset,
    help="SQLAlchemy URL; default: a SQLite file in the preflab data directory.",
)
@click.option(
    "--label-studio-url",
    envvar="LABEL_STUDIO_URL",
    metavar="URL",
    help="Label Studio base URL (the token is read from LABEL_STUDIO_API_KEY).",
)
@click.option(
    "--model",
    envvar="PREFLAB_MODEL",
    default=DEFAULT_MODEL,
    metavar="ID_OR_PATH",
    callback=_empty_is_unset,
    help="Default causal LM: a hub id or a local path; default: the embedded SmolLM2-135M-Instruct.",
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Log at INFO on stderr: preflab's notes (under --json too), HTTP requests, migrations.",
)
@click.pass_context
def cli(ctx, database_url, label_studio_url, model, verbose):
    """Collect rankings of model responses, turn them into preference pairs,
    export Hugging Face datasets and train reward and DPO models.

    Example: preflab import rankings rankings.jsonl && preflab pairs build
    """
    ctx.obj = Settings(database_url, label_studio_url, model)
    if verbose:
        log_to_stderr(ctx)
