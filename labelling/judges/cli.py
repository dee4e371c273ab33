"""`preflab judge KIND`: rank stored candidates with an AI judge; `preflab judge report`."""

from __future__ import annotations

import click

from preflab.console import echo_json, pass_settings
from preflab.settings import Settings


@click.group("judge")
def judge_group():
    """Rank candidates with AI judges (LLM-as-a-judge, reward models, likelihood).

    Example: preflab judge likelihood && preflab judge report
    """


def _common(func):
    options = [
        click.option("--model", "model_name", metavar="ID_OR_PATH",
                     help="Judge model (hub id, path, embedded name or model version); default: the global --model."),
        click.option("--prompts", "prompts_file", type=click.Path(dir_okay=False),
                     help="Judge only the prompts in this JSON Lines file."),
        click.option("--candidates-from", "candidate_model", metavar="MODEL",
                     help="Judge only the candidates this model generated."),
        click.option("--batch-size", type=int, default=8, show_default=True, help="Sequences per forward pass."),
        click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON."),
    ]
    for option in reversed(options):
        func = option(func)
    return pass_settings(func)


def _run(settings: Settings, kind: str, config, model_name, prompts_file, candidate_model, as_json):
    from preflab.db.engine import open_sessions
    from preflab.console import Reporter
    from preflab.labelling.judges.report import judge_report
    from preflab.labelling.judges.run import judge_candidates
    from preflab.labelling.selection import prompts_from_file
    from preflab.training.models.names import resolve_model
    from preflab.training.models.loading import load_causal_lm, load_sequence_scorer

    sessions = open_sessions(settings.database_url)
    prompt_ids = prompts_from_file(sessions, prompts_file) if prompts_file else None
    with sessions.begin() as session:
        label, location, _ = resolve_model(session, model_name or settings.model, record=False)
        if candidate_model:
            candidate_model = resolve_model(session, candidate_model, record=False)[0]
    load = load_sequence_scorer if kind == "reward-model" else load_causal_lm
    model, tokenizer = load(location)
    with Reporter(not as_json).progress(f"judging ({kind})", None) as advance:
        summary = judge_candidates(sessions, kind, model, tokenizer, label, config, prompt_ids, candidate_model,
                                   progress=advance)
    with sessions.begin() as session:
        (measures,) = judge_report(session, [summary.annotator_id])
    report = {**summary.as_dict(), "report": measures}
    if as_json:
        echo_json(report)
        return
    click.echo(f"{kind} judge {summary.run_id} ({label}): ranked {summary.ranked:,} prompts, "
               f"kept {summary.kept:,} already ranked, superseded {summary.superseded:,}, "
               f"{summary.unscored:,} candidates unscored")
    line = _measures_line(measures)
    if line:
        click.echo(line)


def _fmt(value, spec=".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def _measures_line(m: dict) -> str:
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
@click.option("--aggregate", type=click.Choice(["copeland", "bradley-terry"]), default="copeland", show_default=True,
              help="How pair outcomes become a ranking.")
@_common
def pairwise_command(settings, aggregate, model_name, prompts_file, candidate_model, batch_size, as_json):
    """Judge every pair in both orders from the next-token probabilities of "A" and "B".

    Example: preflab judge pairwise --aggregate bradley-terry
    """
    from preflab.labelling.judges.pairwise import PairwiseConfig

    _run(settings, "pairwise", PairwiseConfig(aggregate=aggregate, batch_size=batch_size),
         model_name, prompts_file, candidate_model, as_json)


def _score_options(func):
    options = [
        click.option("--samples", type=int, default=3, show_default=True, help="Scores sampled and averaged."),
        click.option("--retries", type=int, default=2, show_default=True,
                     help="Extra rounds for replies with no parseable score."),
        click.option("--temperature", type=float, default=0.7, show_default=True, help="Judge sampling temperature."),
        click.option("--max-new-tokens", type=int, default=192, show_default=True, help="Longest judge reply."),
        click.option("--seed", type=int, default=0, show_default=True, help="Base random seed."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@judge_group.command("score")
@_score_options
@_common
def score_command(settings, samples, retries, temperature, max_new_tokens, seed, model_name, prompts_file,
                  candidate_model, batch_size, as_json):
    """Grade each response with the additive 5-point prompt, k samples averaged.

    Example: preflab judge score --samples 3 --max-new-tokens 160
    """
    from preflab.labelling.judges.score import ScoreConfig

    config = ScoreConfig(samples=samples, retries=retries, temperature=temperature, max_new_tokens=max_new_tokens,
                         batch_size=batch_size, seed=seed)
    _run(settings, "score", config, model_name, prompts_file, candidate_model, as_json)


@judge_group.command("reference")
@_score_options
@_common
def reference_command(settings, samples, retries, temperature, max_new_tokens, seed, model_name, prompts_file,
                      candidate_model, batch_size, as_json):
    """Grade each response against the prompt's reference answer (prompts with one only).

    Example: preflab judge reference --samples 3
    """
    from preflab.labelling.judges.score import ScoreConfig

    config = ScoreConfig(samples=samples, retries=retries, temperature=temperature, max_new_tokens=max_new_tokens,
                         batch_size=batch_size, seed=seed)
    _run(settings, "reference", config, model_name, prompts_file, candidate_model, as_json)


@judge_group.command("reward-model")
@click.argument("reward_model", metavar="MODEL")
@click.option("--conversational", is_flag=True,
              help="Chat-template the inputs (reward models trained on conversational exports).")
@click.option("--prompts", "prompts_file", type=click.Path(dir_okay=False),
              help="Judge only the prompts in this JSON Lines file.")
@click.option("--candidates-from", "candidate_model", metavar="MODEL", help="Judge only this model's candidates.")
@click.option("--batch-size", type=int, default=8, show_default=True, help="Sequences per forward pass.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@pass_settings
def reward_model_command(settings, reward_model, conversational, prompts_file, candidate_model, batch_size, as_json):
    """Score each response with a one-label sequence-classification model (a reward model).

    Example: preflab judge reward-model out/reward-model
    """
    from preflab.labelling.judges.reward_model import RewardModelConfig

    _run(settings, "reward-model", RewardModelConfig(conversational=conversational, batch_size=batch_size),
         reward_model, prompts_file, candidate_model, as_json)


@judge_group.command("likelihood")
@_common
def likelihood_command(settings, model_name, prompts_file, candidate_model, batch_size, as_json):
    """Score each response by the model's average token log-likelihood of it.

    Example: preflab judge likelihood --model smollm2-135m-instruct
    """
    from preflab.labelling.judges.likelihood import LikelihoodConfig

    _run(settings, "likelihood", LikelihoodConfig(batch_size=batch_size), model_name, prompts_file,
         candidate_model, as_json)


@judge_group.command("report")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@pass_settings
def report_command(settings, as_json):
    """Per judge: swap consistency, parse failures, length bias, agreement with humans.

    Example: preflab judge report --json
    """
    from preflab.db.engine import open_sessions
    from preflab.labelling.judges.report import judge_report

    sessions = open_sessions(settings.database_url)
    with sessions.begin() as session:
        report = judge_report(session)
    if as_json:
        echo_json(report)
        return
    if not report:
        click.echo("no judge has ranked anything yet (see `preflab judge --help`)")
        return
    for m in report:
        click.echo(f"{m['kind']} {m['run_id']} ({m['model']}): {m['rankings']:,} rankings over {m['prompts']:,} prompts")
        line = _measures_line(m)
        if line:
            click.echo(f"  {line}")
        if m["length_correlation"] is not None:
            click.echo(f"  score–length correlation {_fmt(m['length_correlation'])}")
