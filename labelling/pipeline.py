"""`preflab pipeline`: the main job, end to end, on the configured database.

Steps, each the library function behind a CLI command: import the rankings
(the bundled sample unless `--rankings` is given); import prompts (the bundled
sample unless `--prompts`), generate candidates for them with the configured
model (the embedded SmolLM2 by default) and rank every prompt's candidates with
an AI judge; build pairs, report agreement, export a dataset version. Re-running
it is idempotent up to the export, which records a new dataset version:
generation tops up to N and the judge keeps the rankings it already wrote.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import click

from preflab.console import echo_json, pass_settings
from preflab.settings import Settings, data_dir


def sample_rankings_path() -> Path:
    return Path(str(files("preflab.db.samples") / "rankings.jsonl"))


def sample_prompts_path() -> Path:
    return Path(str(files("preflab.db.samples") / "prompts.jsonl"))


def generate_and_judge(settings: Settings, sessions, prompts: Path, max_prompts: int, n: int,
                       max_new_tokens: int, judge: str, generate: bool, quiet: bool) -> dict:
    """Generate candidates for the first `max_prompts` prompts, then judge every prompt's candidates."""
    from preflab.console import Reporter
    from preflab.labelling.generation import GenerateConfig, generate_candidates
    from preflab.labelling.judges.report import judge_report
    from preflab.labelling.judges.run import CONFIGS, judge_candidates
    from preflab.labelling.selection import prompts_from_file
    from preflab.training.models.names import resolve_model
    from preflab.training.models.loading import load_causal_lm

    report: dict = {}
    with sessions.begin() as session:
        label, location, version_id = resolve_model(session, settings.model)
    model, tokenizer = load_causal_lm(location)
    if generate:
        prompt_ids = prompts_from_file(sessions, prompts)[:max_prompts]
        config = GenerateConfig(n=n, max_new_tokens=max_new_tokens, batch_size=16)
        with Reporter(not quiet).progress("generating", len(prompt_ids) * n) as advance:
            summary = generate_candidates(sessions, model, tokenizer, label, config, prompt_ids, version_id, advance)
        report["generate"] = {"model": label, **summary.as_dict()}
    if judge != "none":
        config = CONFIGS[judge]()
        if judge == "score":
            config.max_new_tokens = max_new_tokens
        with Reporter(not quiet).progress(f"judging ({judge})", None) as advance:
            summary = judge_candidates(sessions, judge, model, tokenizer, label, config, progress=advance)
        with sessions.begin() as session:
            (measures,) = judge_report(session, [summary.annotator_id])
        report["judge"] = {**summary.as_dict(), "report": measures}
    return report


@click.command("pipeline")
@click.option("--rankings", type=click.Path(dir_okay=False), help="JSON Lines rankings (default: the bundled sample).")
@click.option("--out", type=click.Path(file_okay=False), help="Export folder (default: DATA_DIR/exports/latest).")
@click.option("--strategy", default="all", show_default=True, help="Pair strategy (see `preflab pairs build`).")
@click.option("--format", "fmt", default="disk", show_default=True, help="Export format (see `preflab export`).")
@click.option("--prompts", type=click.Path(dir_okay=False), help="JSON Lines prompts (default: the bundled sample).")
@click.option("--max-prompts", type=int, default=4, show_default=True, help="Prompts to generate candidates for.")
@click.option("-n", "--n", "n", type=int, default=4, show_default=True, help="Candidates per prompt.")
@click.option("--max-new-tokens", type=int, default=40, show_default=True, help="Longest generated response.")
@click.option("--judge", type=click.Choice(["likelihood", "pairwise", "score", "none"]), default="likelihood",
              show_default=True, help="The AI judge that ranks every prompt's candidates.")
@click.option("--no-generate", is_flag=True, help="Skip generation (judge the stored candidates only).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary of every step.")
@pass_settings
def pipeline_command(settings: Settings, rankings, out, strategy, fmt, prompts, max_prompts, n, max_new_tokens,
                     judge, no_generate, as_json):
    """Run the main job: import rankings, generate and judge candidates, build pairs, export.

    Example: preflab pipeline --out out/prefs
    """
    from preflab.db.agreement import stats
    from preflab.db.engine import open_sessions
    from preflab.db.export import ExportSettings, export_dataset
    from preflab.db.ingest import import_file, import_rankings_batch
    from preflab.db.pairs import build_pairs

    sessions = open_sessions(settings.database_url)
    rankings = rankings or sample_rankings_path()
    out = Path(out) if out else data_dir() / "exports" / "latest"
    report: dict = {"database": settings.redacted_url()}

    summary = import_file(sessions, rankings, import_rankings_batch)
    report["import"] = summary.as_dict()
    if judge != "none" or not no_generate:
        report.update(generate_and_judge(settings, sessions, Path(prompts) if prompts else sample_prompts_path(),
                                         max_prompts, n, max_new_tokens, judge, not no_generate, as_json))
    with sessions.begin() as session:
        report["pairs"] = build_pairs(session, strategy=strategy).as_dict()
    with sessions.begin() as session:
        report["stats"] = stats(session)
    with sessions.begin() as session:
        version = export_dataset(session, out, ExportSettings(format=fmt))
        report["export"] = {"name": version.name, "path": version.path, "train": version.n_train,
                            "test": version.n_test, "content_hash": version.content_hash}
    if as_json:
        echo_json(report)
        return
    imp, agree = report["import"], report["stats"]["agreement"]["all"]
    click.echo(f"import: {imp['imported']:,} new rankings, {imp['duplicates']:,} already stored, "
               f"{imp['quarantined']:,} quarantined")
    if "generate" in report:
        gen = report["generate"]
        click.echo(f"generate: {gen['stored']:,} new candidates for {gen['prompts']:,} prompts with {gen['model']} "
                   f"({gen['tokens_per_s'] or 0:,.0f} tokens/s)")
    if "judge" in report:
        j, agree_h = report["judge"], report["judge"]["report"]["human_agreement"]
        line = f"judge: {j['judge']} ranked {j['ranked']:,} prompts ({j['kept']:,} already ranked)"
        if agree_h["pairwise_agreement"] is not None:
            line += (f"; agrees with humans on {agree_h['pairwise_agreement']:.3f} of "
                     f"{agree_h['shared_pairs']:,} pairs over {agree_h['prompts']:,} prompts")
        click.echo(line)
    click.echo(f"pairs: {report['pairs']['pairs']:,} comparisons from {report['pairs']['rankings']:,} rankings")
    if agree["pairwise_agreement"] is not None:
        click.echo(f"agreement: {agree['pairwise_agreement']:.3f} on {agree['shared_pairs']:,} shared pairs "
                   f"(Kendall tau-b {agree['kendall_tau']:.3f}) over {agree['prompts']:,} prompts")
    click.echo(f"export: {report['export']['train']:,} train / {report['export']['test']:,} test pairs "
               f"→ {out} ({report['export']['name']})")
