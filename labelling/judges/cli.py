"""`preflab judge KIND`: rank stored candidates with an AI judge; `preflab judge report`."""

from __future__ import annotations

import click

from preflab.console import Reporter, build_config, config_options, echo_json, json_option, pass_settings
from preflab.labelling.judges.likelihood import LikelihoodConfig
from preflab.labelling.judges.pairwise import PairwiseConfig
from preflab.labelling.judges.reward_model import RewardModelConfig
from preflab.labelling.judges.score import ScoreConfig
from preflab.settings import Settings


@click.group("judge")
def judge_group():
    """Rank candidates with AI judges and report how far to trust them.

    Judges: LLM-as-a-judge (pairwise, score, reference), reward models, likelihood.

    Example: preflab judge likelihood && preflab judge report
    """


model_option = click.option(
    "--model", "model_name", metavar="ID_OR_PATH",
    help="Judge model (hub id, path, embedded name or model version); default: the global --model.")


def target_options(func):
    """What to judge (a prompts file, one model's candidates), and `--json`."""
    for option in reversed([
        click.option("--prompts", "prompts_file", type=click.Path(dir_okay=False),
                     help="Judge only the prompts in this JSON Lines file."),
        click.option("--candidates-from", "candidate_model", metavar="MODEL",
                     help="Judge only the candidates this model generated."),
        json_option,
    ]):
        func = option(func)
    return pass_settings(func)


def judge_and_print(settings: Settings, kind: str, config, model_name: str | None, prompts_file: str | None,
                    candidate_model: str | None, as_json: bool) -> None:
    """Run the judge job and print what it did, with the measures of how far to trust it."""
    from preflab.db.engine import open_sessions
    from preflab.labelling.judges.run import run_judge

    result = run_judge(open_sessions(settings.database_url), kind, config, model_name or settings.model,
                       prompts=prompts_file, candidates_from=candidate_model, reporter=Reporter(not as_json))
    if as_json:
        echo_json(result.as_dict())
        return
    s = result.summary
    click.echo(f"{kind} judge {s.run_id} ({result.model}): ranked {s.ranked:,} prompts, "
               f"kept {s.kept:,} already ranked, superseded {s.superseded:,}, {s.unscored:,} candidates unscored")
    line = measures_line(result.measures)
    if line:
        click.echo(line)


def _fmt(value, spec=".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def measures_line(m: dict) -> str:
    """One line of a judge's trust measures (those it has)."""
    parts = []
    if m["swap_consistency"] is not None:
        parts.append(f"swap consistency {_fmt(m['swap_consistency'])} (first answer preferred "
                     f"{_fmt(m['first_position_rate'])}) on {m['pairs_judged']:,} pairs")
    if m["parse_failure_rate"] is not None:
        parts.append(f"parse failures {_fmt(m['parse_failure_rate'])} of {m['score_attempts']:,} replies")
    if m["longer_wins"] is not None:
        parts.append(f"longer response ranked higher {_fmt(m['longer_wins'])}")
    agree = m["human_agreement"]
    if agree["pairwise_agreement"] is not None:
        parts.append(f"agrees with humans on {_fmt(agree['pairwise_agreement'])} of {agree['shared_pairs']:,} pairs")
    return "; ".join(parts)


@judge_group.command("pairwise")
@model_option
@config_options(PairwiseConfig)
@target_options
def pairwise_command(settings, model_name, prompts_file, candidate_model, as_json, **options):
    """Judge every pair in both orders from the next-token probabilities of "A" and "B".

    Example: preflab judge pairwise --aggregate bradley-terry
    """
    judge_and_print(settings, "pairwise", build_config(PairwiseConfig, options), model_name, prompts_file,
                    candidate_model, as_json)


@judge_group.command("score")
@model_option
@config_options(ScoreConfig)
@target_options
def score_command(settings, model_name, prompts_file, candidate_model, as_json, **options):
    """Grade each response with the additive 5-point prompt, k samples averaged.

    Example: preflab judge score --samples 3 --max-new-tokens 160
    """
    judge_and_print(settings, "score", build_config(ScoreConfig, options), model_name, prompts_file,
                    candidate_model, as_json)


@judge_group.command("reference")
@model_option
@config_options(ScoreConfig)
@target_options
def reference_command(settings, model_name, prompts_file, candidate_model, as_json, **options):
    """Grade each response against the prompt's reference answer (prompts with one only).

    Example: preflab judge reference --samples 3
    """
    judge_and_print(settings, "reference", build_config(ScoreConfig, options), model_name, prompts_file,
                    candidate_model, as_json)


@judge_group.command("reward-model")
@click.argument("reward_model", metavar="MODEL")
@config_options(RewardModelConfig)
@target_options
def reward_model_command(settings, reward_model, prompts_file, candidate_model, as_json, **options):
    """Score each response with a one-label sequence-classification model (a reward model).

    Example: preflab judge reward-model out/reward-model
    """
    judge_and_print(settings, "reward-model", build_config(RewardModelConfig, options), reward_model,
                    prompts_file, candidate_model, as_json)


@judge_group.command("likelihood")
@model_option
@config_options(LikelihoodConfig)
@target_options
def likelihood_command(settings, model_name, prompts_file, candidate_model, as_json, **options):
    """Score each response by the model's average token log-likelihood of it.

    Example: preflab judge likelihood --model smollm2-135m-instruct
    """
    judge_and_print(settings, "likelihood", build_config(LikelihoodConfig, options), model_name, prompts_file,
                    candidate_model, as_json)


@judge_group.command("report")
@json_option
@pass_settings
def report_command(settings, as_json):
    """Per judge: swap consistency, parse failures, length bias, agreement with humans.

    Example: preflab judge report --json
    """
    from preflab.db.engine import open_sessions
    from preflab.labelling.judges.report import judge_report

    with open_sessions(settings.database_url).begin() as session:
        report = judge_report(session)
    if as_json:
        echo_json(report)
        return
    if not report:
        click.echo("no judge has ranked anything yet (see `preflab judge --help`)")
        return
    for m in report:
        click.echo(f"{m['kind']} {m['run_id']} ({m['model']}): {m['rankings']:,} rankings over {m['prompts']:,} prompts")
        line = measures_line(m)
        if line:
            click.echo(f"  {line}")
        if m["length_correlation"] is not None:
            click.echo(f"  score–length correlation {_fmt(m['length_correlation'])}")
