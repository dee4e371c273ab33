"""`preflab judge KIND`: rank stored candidates with an AI judge; `preflab judge report`.

One `judge KIND` command per entry of the table of judges (`preflab.labelling.judges.table`).
"""

from __future__ import annotations

from dataclasses import fields

import click
from click.core import ParameterSource

from preflab.commands.engine_options import engine_config, engine_line, engine_options
from preflab.commands.options import (
    build_config,
    config_options,
    echo_result,
    json_option,
    name_shard,
    pass_settings,
)
from preflab.console import Reporter
from preflab.db.models import OVERALL
from preflab.labelling.judges.base import ReadBudget
from preflab.labelling.judges.report import LOW_MASS
from preflab.labelling.judges.table import JUDGES, Judge
from preflab.labelling.selection import PromptSelection
from preflab.settings import Settings


@click.group("judge")
def judge_group():
    """Rank candidates with AI judges and report how far to trust them.

    Judges: LLM-as-a-judge (pairwise, score, reference), reward models, likelihood.

    Example: preflab judge likelihood && preflab judge report
    """


model_option = click.option(
    "--model",
    "model_name",
    metavar="ID_OR_PATH",
    help="Judge model (hub id, path, embedded name or model version); default: the global --model.",
)
# The judges that read a causal LM run on an engine: in this process, or on a server; several models are a panel.
panel_option = click.option(
    "--model",
    "model_name",
    metavar="NAME",
    multiple=True,
    help="Judge model (hub id, path, embedded name or model version; with --engine openai the served model's "
    "name); default: the global --model. Repeat it for a panel of judges (majority of verdicts, mean of "
    "scores); a member may sit on a server of its own (NAME@URL), or list the members in a TOML file.",
)


# Of the prompt selection `generate` takes, the judges take the shard: one worker's slice of what is stored.
NOT_JUDGED_BY = tuple(f.name for f in fields(PromptSelection) if f.name != "shard")


def target_options(func):
    """What to judge (a prompts file, one model's candidates, one shard), and `--json`."""
    for option in reversed(
        [
            click.option(
                "--prompts",
                "prompts_file",
                type=click.Path(dir_okay=False),
                help="Judge only the prompts in this JSON Lines file.",
            ),
            click.option(
                "--candidates-from",
                "candidate_model",
                metavar="MODEL",
                help="Judge only the candidates this model generated.",
            ),
            config_options(PromptSelection, exclude=NOT_JUDGED_BY),
            json_option,
        ]
    ):
        func = option(func)
    return pass_settings(func)


def judge_and_print(
    settings: Settings,
    kind: str,
    config,
    model_name: str | tuple[str, ...] | None,
    prompts_file: str | None,
    candidate_model: str | None,
    as_json: bool,
    selection: PromptSelection = PromptSelection(),
    engine=None,
    budget: ReadBudget = ReadBudget(),
) -> None:
    """Run the judge job and print what it did, with the measures of how far to trust it (this run's)."""
    from preflab.db.engine import open_sessions
    from preflab.labelling.judges.run import run_judge

    result = run_judge(
        open_sessions(settings.database_url),
        kind,
        config,
        model_name or settings.model,
        prompts=prompts_file,
        candidates_from=candidate_model,
        selection=selection,
        engine=engine,
        reporter=Reporter(not as_json),
        budget=budget,
    )
    echo_result(as_json, result.as_dict(), lambda: _judged_text(kind, result))


def _judged_text(kind: str, result) -> str:
    """What a judge run ranked (its panel's members too), what it asked a server, and its measures."""
    s = result.summary
    lines = [
        f"{judge_label(kind, result.measures['method'])} judge {s.run_id} ({result.model})"
        f"{'' if s.criterion == OVERALL else ' by ' + s.criterion}: "
        f"ranked {s.ranked:,} prompts{abstained_text(s.abstained)}, "
        f"kept {s.kept:,} already ranked, superseded {s.superseded:,}, {s.unscored:,} candidates unscored"
    ]
    for each in s.extra.get("criteria", [])[1:]:  # the first is the line above
        lines.append(
            f"  by {each['criterion']}: judge {each['run_id']}: ranked {each['ranked']:,} prompts"
            f"{abstained_text(each['abstained'])}, kept {each['kept']:,}"
        )
    for member in s.extra.get("members", []):
        lines.append(
            f"  member {member['run_id']} ({member['model']}): ranked {member['ranked']:,} prompts"
            f"{abstained_text(member['abstained'])}, kept {member['kept']:,}"
        )
    if s.extra.get("unanswered"):
        lines.append(
            f"{s.extra['unanswered']:,} prompts left unranked (no answer after every retry): run it again "
            f"to ask for what is missing"
        )
    if line := engine_line(s.extra.get("engine")):
        lines.append(line)
    line = measures_line(result.measures)
    if line:
        lines.append(f"{result.measures['scope']}: {line}")
    return "\n".join(lines)


def abstained_text(n: int) -> str:
    """`, 3 abstained (fewer than two replies read: no ranking stored)`, or nothing."""
    return f", {n:,} abstained (fewer than two replies read: no ranking)" if n else ""


def _fmt(value, spec=".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def judge_label(kind: str, method: str | None) -> str:
    """`pairwise`, `score (expected)`: the kind, and the method where a kind has several."""
    return f"{kind} ({method})" if method else kind


def measures_line(m: dict) -> str:
    """One line of a judge's trust measures (those it has)."""
    parts = []
    if m["swap_consistency"] is not None:
        parts.append(
            f"swap consistency {_fmt(m['swap_consistency'])} (first answer preferred "
            f"{_fmt(m['first_position_rate'])}; position decided {_fmt(m['position_bias'])}) on "
            f"{m['pairs_judged']:,} pairs"
        )
    if m["parse_failure_rate"] is not None:
        parts.append(f"parse failures {_fmt(m['parse_failure_rate'])} of {m['score_attempts']:,} replies")
    if m["score_mass"] is not None:
        mass = f"score tokens take {_fmt(m['score_mass'])} of the next-token probability"
        below = f"{_fmt(m['low_mass_rate'], '.0%')} of candidates below {LOW_MASS}"
        parts.append(f"{mass}, {below}: the judge is guessing" if m["guessing"] else f"{mass} ({below})")
    if m["seconds_per_candidate"] is not None:
        parts.append(f"{_fmt(m['seconds_per_candidate'], '.3f')} s per candidate")
    if m.get("abstentions"):
        parts.append(f"{m['abstentions']:,} abstentions (replies that could not be read)")
    if m.get("cost_per_1000_pairs") is not None:
        parts.append(f"cost {m['cost_per_1000_pairs']:.4f} per 1,000 pairs")
    if m.get("pairs_per_s") is not None:
        parts.append(f"{m['pairs_per_s']:,.1f} pairs/s")
    if m["longer_wins"] is not None:
        parts.append(f"longer response ranked higher {_fmt(m['longer_wins'])}")
    agree = m["human_agreement"]
    if agree["pairwise_agreement"] is not None:
        parts.append(f"agrees with humans on {_fmt(agree['pairwise_agreement'])} of {agree['shared_pairs']:,} pairs")
    return "; ".join(parts)


# An option counts as given when the user set it, not when it kept its default.
GIVEN = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def judge_command(kind: str, judge: Judge) -> click.Command:
    """`preflab judge KIND`, from its entry in the table: its config's options, its model, what to judge."""

    def command(settings, model_name, prompts_file, candidate_model, as_json, **options):
        ctx = click.get_current_context()
        given = {name for name in options if ctx.get_parameter_source(name) in GIVEN}
        selection = build_config(PromptSelection, options)
        name_shard(selection.shard)
        # The served model is each --model (the config checks one is named for --engine openai).
        engine = engine_config(options, (model_name or (settings.model,))[0]) if on_engine else None
        config = build_config(judge.config, options)
        budget = build_config(ReadBudget, options)
        if judge.check_given is not None:
            judge.check_given(config, given)
        judge_and_print(
            settings, kind, config, model_name, prompts_file, candidate_model, as_json, selection, engine, budget
        )

    # A judge that reads a causal LM (not a scorer's sequence classifier) runs on an engine: it takes
    # --engine and its options, and a panel of --model.
    on_engine = not judge.scorer
    model = (
        click.argument("model_name", metavar=judge.model_argument)
        if judge.model_argument
        else panel_option
        if on_engine
        else model_option
    )
    command = config_options(judge.config)(config_options(ReadBudget)(target_options(command)))
    if on_engine:
        command = engine_options(command)
    return judge_group.command(kind, help=judge.help)(model(command))


JUDGE_COMMANDS = {kind: judge_command(kind, judge) for kind, judge in JUDGES.items()}


@judge_group.command("report")
@json_option
@pass_settings
def judge_report_command(settings, as_json):
    """Per judge: agreement with humans, swap consistency, parse failures, guessing, time, length bias.

    Example: preflab judge report --json
    """
    from preflab.db.engine import open_sessions
    from preflab.labelling.judges.report import judge_report

    with open_sessions(settings.database_url, existing=True).begin() as session:
        report = judge_report(session)
    echo_result(as_json, report, lambda: _report_text(report))


def _report_text(report: list[dict]) -> str:
    """Each judge run's measures, then the runs that ranked something side by side."""
    if not report:
        return "no judge has ranked anything yet (see `preflab judge --help`)"
    lines = []
    for m in report:
        lines.append(
            f"{judge_label(m['kind'], m['method'])} {m['run_id']} ({m['model']}): "
            f"{m['rankings']:,} rankings over {m['prompts']:,} prompts"
        )
        line = measures_line(m)
        if line:
            lines.append(f"  {line}")
        if m["length_correlation"] is not None:
            lines.append(f"  score–length correlation {_fmt(m['length_correlation'])}")
    ranked = [m for m in report if m["rankings"]]
    if len(ranked) > 1:
        lines += ["\nside by side:", side_by_side(ranked)]
    return "\n".join(lines)


def side_by_side(report: list[dict]) -> str:
    """One row per judge: agreement with people, swap consistency, time per candidate, score mass."""
    rows = [("judge", "run", "agrees with people", "swap consistency", "s/candidate", "score mass")]
    for m in report:
        agree = m["human_agreement"]
        rows.append(
            (
                judge_label(m["kind"], m["method"]),
                m["run_id"] or "",
                f"{_fmt(agree['pairwise_agreement'])} of {agree['shared_pairs']:,} pairs",
                _fmt(m["swap_consistency"]),
                _fmt(m["seconds_per_candidate"], ".3f"),
                _fmt(m["score_mass"]) + (" (guessing)" if m["guessing"] else ""),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
