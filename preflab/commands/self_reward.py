"""`preflab self-reward run` (the default): the self-rewarding loop; and `preflab self-reward report`."""

from __future__ import annotations

import dataclasses

import click
from click.core import ParameterSource

from preflab.commands.engine_options import engine_config, engine_line, engine_options
from preflab.commands.options import DefaultGroup, config_options, echo_result, json_option
from preflab.console import Reporter
from preflab.settings import Settings
from preflab.training.config import DPOTrainConfig
from preflab.training.selfreward.config import SelfRewardConfig

# Both configs have a seed: DPO's is --seed (as in `train dpo`), the loop's sampling seed --sampling-seed.
LOOP_RENAMED = {"seed": "sampling_seed"}


def _rate(value, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


def _people(agreement: dict | None) -> str:
    """ "; the judge agrees with people on 0.56 of 84 pairs (8 prompts they ranked)", or nothing."""
    if not agreement or agreement["pairwise_agreement"] is None:
        return ""
    return (
        f"; the judge agrees with people on {agreement['pairwise_agreement']:.2f} of "
        f"{agreement['shared_pairs']:,} pairs ({agreement['prompts']} prompts they ranked)"
    )


def _only(cls, names) -> tuple[str, ...]:
    """Every field of `cls` except `names` (to give those an option of their own)."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.name not in names)


def _given(ctx: click.Context, values: dict, cls, renamed: dict[str, str] | None = None) -> dict:
    """The fields of `cls` set on the command line (not left at their defaults)."""
    renamed = renamed or {}
    out = {}
    for f in dataclasses.fields(cls):
        param = renamed.get(f.name, f.name)
        if ctx.get_parameter_source(param) is not ParameterSource.DEFAULT:
            out[f.name] = values[param]
    return out


@click.group("self-reward", cls=DefaultGroup, default="run")
def self_reward_group():
    """Self-rewarding iterative DPO: M_t writes prompts, samples, judges itself, and DPO gives M_{t+1}.

    `run` is the default command: `preflab self-reward --iterations 3` is
    `preflab self-reward run --iterations 3`. `report` prints each iteration's
    win rate and its judge's agreement with people.

    Example: preflab self-reward --iterations 3 --with-human && preflab self-reward report
    """


@self_reward_group.command("run")
@click.option(
    "--iterations",
    type=click.IntRange(min=1),
    metavar="T",
    help="Run until the loop has T finished iterations (a stopped one is resumed first).",
)
@click.option("--loop", default="default", show_default=True, help="Name of the loop; one database can hold several.")
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False),
    help="Folder for datasets and models (default: DATA_DIR/self-reward/LOOP).",
)
@json_option
@config_options(SelfRewardConfig, exclude=tuple(LOOP_RENAMED))
@config_options(SelfRewardConfig, exclude=_only(SelfRewardConfig, LOOP_RENAMED), prefix="sampling_")
@config_options(DPOTrainConfig)
@engine_options
@click.pass_context
def run_command(ctx, iterations, loop, output_dir, as_json, **fields):
    """Run the loop until T iterations are done (the default command).

    The judge is M_t itself by default, with the additive 5-point score prompt
    read as an expected score from one forward pass (--judge-method expected,
    always, whatever the model's size: it always yields a score, where a small
    model rarely writes "Score: n"); --judge-method sampled averages k sampled
    replies as the paper does. Each evaluation also has the judge rank up to
    --agreement-prompts prompts people ranked, and records its agreement with them.

    Everything is stored with its iteration and lineage (M_0 → M_1 → …); a
    stopped run resumes at the step it reached when run again. Options not
    given are those of the loop's last iteration, so `--iterations 5` alone
    extends a loop with its own settings. Set
    PREFLAB_FAIL_AT=self-reward:STEP[:ITERATION] to rehearse a crash.

    With --engine openai, M_t writes its prompts and samples its candidates on the
    server at --api-base, which serves it under its model version's name (M_0: the
    name --model gives), and an LM judge (likelihood, pairwise, score, reference) asks it
    there too (or --judge-model, by its served name); a reward-model judge and DPO run here.
    The engine options are this run's alone: they are not stored with the loop.

    Example: preflab self-reward run --iterations 3 --with-human
    """
    if iterations is None:
        raise click.UsageError("give --iterations T, or a subcommand (report)")
    from preflab.db.engine import open_sessions
    from preflab.training.selfreward.config import loop_settings
    from preflab.training.selfreward.loop import run_self_reward

    settings = ctx.find_object(Settings)
    sessions = open_sessions(settings.database_url)
    with sessions.begin() as session:
        config, dpo = loop_settings(
            session,
            loop,
            _given(ctx, fields, SelfRewardConfig, LOOP_RENAMED),
            _given(ctx, fields, DPOTrainConfig),
            settings.model,
        )
    # The served model is named per step (each iteration's M_{t-1}); M_0's name checks the options now.
    engine = engine_config(dict(fields), config.model)
    summaries = run_self_reward(
        sessions, config, dpo, iterations, loop, output_dir, reporter=Reporter(not as_json), engine=engine
    )
    echo_result(as_json, summaries, lambda: _ran_text(summaries, loop, iterations))


def _ran_text(summaries: list[dict], loop: str, iterations: int) -> str:
    """A line per iteration run (and per step that asked a server), then what the loop did."""
    lines = []
    for s in summaries:
        pairs = s["pairs"] or {}
        lines.append(
            f"iteration {s['iteration']}: {s['model_version']} from {s['parent']}: "
            f"{s['prompts']} prompts, {s['candidates']} candidates, {pairs.get('judge', 0)} judge pairs"
            f" + {pairs.get('human', 0)} from people; win rate {_rate(s['win_rate'])} against {s['parent']}"
            f"{_people(s['judge_agreement_ranked'])}"
        )
        for step, stats in s["engine"].items():
            if line := engine_line(stats):
                lines.append(f"iteration {s['iteration']}: {step} on {line}")
    lines.append(
        f"loop {loop}: ran {len(summaries)} iteration(s)"
        if summaries
        else f"loop {loop} already has {iterations} finished iteration(s); nothing to do"
    )
    return "\n".join(lines)


def _agreement(agree: dict | None) -> str:
    if not agree or agree["pairwise_agreement"] is None:
        return "n/a"
    return f"{agree['pairwise_agreement']:.2f} ({agree['shared_pairs']})"


@self_reward_group.command("report")
@click.option("--loop", default="default", show_default=True, help="Name of the loop.")
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    help="Where to write the PNG (default: self-reward-LOOP.png in the current folder).",
)
@json_option
@click.pass_context
def loop_report_command(ctx, loop, plot_path, as_json):
    """Each iteration's win rate against the previous model and its judge's agreement with people; a PNG plot.

    judge~people: on the iteration's own prompts, once people rank them;
    judge~ranked: on the prompts people had ranked when the iteration was evaluated.

    Example: preflab self-reward report --loop default --plot loop.png
    """
    from preflab.db.engine import open_sessions
    from preflab.training.selfreward.report import write_loop_report

    with open_sessions(ctx.find_object(Settings).database_url, existing=True).begin() as session:
        rows, path = write_loop_report(session, loop, plot_path)
    data = {"loop": loop, "plot": str(path), "iterations": rows}
    echo_result(as_json, data, lambda: _loop_text(rows, path))


def _loop_text(rows: list[dict], path) -> str:
    """The loop's iterations as a table, and where the plot is."""
    lines = [
        f"{'iter':>4}  {'model':<14} {'parent':<24} {'prompts':>7} {'pairs':>7} {'win rate':>8} "
        f"{'W/L/T':>9} {'judge~people':>12} {'judge~ranked':>12} {'step':<10}"
    ]
    for r in rows:
        pairs = r["pairs"] or {}
        agree = r["judge_agreement"]
        wlt = "-" if r["wins"] is None else f"{r['wins']}/{r['losses']}/{r['ties']}"
        lines.append(
            f"{r['iteration']:>4}  {r['model_version'] or '-':<14} {r['parent'][-24:]:<24} "
            f"{r['prompts'] or 0:>7} {pairs.get('judge', 0) + pairs.get('human', 0):>7} "
            f"{_rate(r['win_rate']):>8} {wlt:>9} {_agreement(agree):>12} "
            f"{_agreement(r['judge_agreement_ranked']):>12} {r['step']:<10}"
        )
    lines.append(f"plot written to {path}")
    return "\n".join(lines)
