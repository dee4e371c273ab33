"""`preflab judge KIND`: rank stored candidates with an AI judge; `preflab judge report`."""

from __future__ import annotations

import click

from preflab.console import Reporter, build_config, config_options, echo_json, json_option, pass_settings
from preflab.labelling.judges.likelihood import LikelihoodConfig
from preflab.labelling.judges.pair_ranker import PairRankerConfig
from preflab.labelling.judges.pairwise import PairwiseConfig
from preflab.labelling.judges.report import LOW_MASS
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
    click.echo(f"{judge_label(kind, result.measures['method'])} judge {s.run_id} ({result.model}): "
               f"ranked {s.ranked:,} prompts, "
               f"kept {s.kept:,} already ranked, superseded {s.superseded:,}, {s.unscored:,} candidates unscored")
    line = measures_line(result.measures)
    if line:
        click.echo(line)


def _fmt(value, spec=".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def judge_label(kind: str, method: str | None) -> str:
    """`pairwise`, `score (expected)`: the kind, and the method where a kind has several."""
    return f"{kind} ({method})" if method else kind


def measures_line(m: dict) -> str:
    """One line of a judge's trust measures (those it has)."""
    parts = []
    if m["swap_consistency"] is not None:
        parts.append(f"swap consistency {_fmt(m['swap_consistency'])} (first answer preferred "
                     f"{_fmt(m['first_position_rate'])}) on {m['pairs_judged']:,} pairs")
    if m["parse_failure_rate"] is not None:
        parts.append(f"parse failures {_fmt(m['parse_failure_rate'])} of {m['score_attempts']:,} replies")
    if m["score_mass"] is not None:
        mass = f"score tokens take {_fmt(m['score_mass'])} of the next-token probability"
        below = f"{_fmt(m['low_mass_rate'], '.0%')} of candidates below {LOW_MASS}"
        parts.append(f"{mass}, {below}: the judge is guessing" if m["guessing"] else f"{mass} ({below})")
    if m["seconds_per_candidate"] is not None:
        parts.append(f"{_fmt(m['seconds_per_candidate'], '.3f')} s per candidate")
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
    """Grade each response with the additive 5-point prompt: k sampled replies, or the expected score.

    --method sampled samples k replies and averages their "Score: n"; --method
    expected starts the answer with "Score: " and reads the probability-weighted
    mean of the tokens 0-5 from one forward pass per response: it always yields a
    score, and `preflab judge report` says when the judge is guessing.

    Example: preflab judge score --method expected
    """
    judge_and_print(settings, "score", build_config(ScoreConfig, options), model_name, prompts_file,
                    candidate_model, as_json)


@judge_group.command("reference")
@model_option
@config_options(ScoreConfig)
@target_options
def reference_command(settings, model_name, prompts_file, candidate_model, as_json, **options):
    """Grade each response against the prompt's reference answer (prompts with one only).

    The same two methods as `preflab judge score` (--method sampled or expected).

    Example: preflab judge reference --method expected
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


@judge_group.command("pair-ranker")
@click.argument("ranker", metavar="VERSION")
@config_options(PairRankerConfig)
@target_options
def pair_ranker_command(settings, ranker, prompts_file, candidate_model, as_json, **options):
    """Rank candidates from a trained pair ranker's P(A ≻ B) for every pair; the probabilities are stored.

    VERSION is a `preflab train pair-ranker` model version (or its folder). Each
    candidate's details keep P(it ≻ each other candidate); the ranking is their
    Copeland score (wins − losses) or --aggregate bradley-terry.

    Example: preflab judge pair-ranker pair-ranker-4 --aggregate bradley-terry
    """
    judge_and_print(settings, "pair-ranker", build_config(PairRankerConfig, options), ranker, prompts_file,
                    candidate_model, as_json)


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
    """Per judge: agreement with humans, swap consistency, parse failures, guessing, time, length bias.

    Example: preflab judge report --json
    """
    from preflab.db.engine import open_sessions
    from preflab.labelling.judges.report import judge_report

    with open_sessions(settings.database_url, existing=True).begin() as session:
        report = judge_report(session)
    if as_json:
        echo_json(report)
        return
    if not report:
        click.echo("no judge has ranked anything yet (see `preflab judge --help`)")
        return
    for m in report:
        click.echo(f"{judge_label(m['kind'], m['method'])} {m['run_id']} ({m['model']}): "
                   f"{m['rankings']:,} rankings over {m['prompts']:,} prompts")
        line = measures_line(m)
        if line:
            click.echo(f"  {line}")
        if m["length_correlation"] is not None:
            click.echo(f"  score–length correlation {_fmt(m['length_correlation'])}")
    ranked = [m for m in report if m["rankings"]]
    if len(ranked) > 1:
        click.echo("\nside by side:")
        click.echo(side_by_side(ranked))


def side_by_side(report: list[dict]) -> str:
    """One row per judge: agreement with people, swap consistency, time per candidate, score mass."""
    rows = [("judge", "run", "agrees with people", "swap consistency", "s/candidate", "score mass")]
    for m in report:
        agree = m["human_agreement"]
        rows.append((judge_label(m["kind"], m["method"]), m["run_id"] or "",
                     f"{_fmt(agree['pairwise_agreement'])} of {agree['shared_pairs']:,} pairs",
                     _fmt(m["swap_consistency"]), _fmt(m["seconds_per_candidate"], ".3f"),
                     _fmt(m["score_mass"]) + (" (guessing)" if m["guessing"] else "")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
