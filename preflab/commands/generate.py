"""`preflab generate` (N candidate responses per prompt) and `preflab pipeline` (the main job)."""

from __future__ import annotations

from pathlib import Path

import click

from preflab.commands.engine_options import engine_config, engine_line, engine_options
from preflab.commands.options import (
    build_config,
    config_options,
    echo_result,
    json_option,
    name_shard,
    pass_settings,
)
from preflab.console import Reporter, plural
from preflab.labelling.generation import GenerateConfig
from preflab.labelling.pipeline import GENERATE_DEFAULTS, PipelineConfig
from preflab.labelling.selection import PromptSelection
from preflab.settings import Settings


@click.command("generate")
@click.option(
    "--model",
    "model_name",
    metavar="ID_OR_PATH",
    help="Causal LM (hub id, path, embedded name or model version; with --engine openai, the served "
    "model's name); default: the global --model.",
)
@config_options(GenerateConfig)
@engine_options
@click.option(
    "--prompts",
    "prompts_file",
    type=click.Path(dir_okay=False),
    help="JSON Lines prompts to import and generate for (default: every stored prompt).",
)
@config_options(PromptSelection)
@json_option
@pass_settings
def generate_command(settings: Settings, model_name, prompts_file, as_json, **options):
    """Sample N candidate responses per prompt with a causal LM.

    Each response is stored as a candidate; a re-run tops every prompt up to N.
    --limit, --prompt-id, --split and --source choose among the stored prompts (or the file's).
    --shard K/N takes slice K (from 0) of N, for N workers on one store: a Slurm
    array (--shard $SLURM_ARRAY_TASK_ID/8) or a Kubernetes indexed Job.

    --engine openai samples on an OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp,
    Ollama, a hosted API) at --api-base, --model naming the served model; the key comes
    from OPENAI_API_KEY. Every answer is stored as it arrives: a re-run, or a run resumed
    after a crash, pays only for what is missing.

    Example: preflab generate -n 4 --limit 10 --split train --max-new-tokens 128
    """
    from preflab.db.engine import open_sessions
    from preflab.labelling.generation import run_generation

    config = build_config(GenerateConfig, options)
    selection = build_config(PromptSelection, options)
    name_shard(selection.shard)
    engine = engine_config(options, model_name or settings.model)
    summary = run_generation(
        open_sessions(settings.database_url),
        model_name or settings.model,
        config,
        prompts=prompts_file,
        selection=selection,
        engine=engine,
        reporter=Reporter(not as_json),
    )
    echo_result(as_json, summary.as_dict(), lambda: _generated_text(summary, config.n))


def _generated_text(summary, n: int) -> str:
    """What generation stored, what the server would not answer, and what it was asked."""
    waiting = f"; {plural(summary.waiting, 'more prompt')} left by --limit" if summary.waiting else ""
    lines = [
        f"generated {plural(summary.stored, 'candidate')} for {plural(summary.prompts, 'prompt')} with "
        f"{summary.model} ({summary.duplicates:,} duplicates, {summary.empty:,} empty, "
        f"{plural(summary.short, 'prompt')} short of {n}{waiting})",
        *unanswered_lines(summary),
    ]
    if line := engine_line(summary.engine):
        lines.append(line)
    return "\n".join(lines)


def unanswered_lines(summary) -> list[str]:
    """What the server would not answer: prompts quarantined (and why), samples left for the next run."""
    lines = []
    if summary.quarantined:
        lines.append(
            f"quarantined {plural(summary.quarantined, 'prompt')} the server refused "
            f"(kept with the reason; not asked again)"
        )
    if summary.failed:
        lines.append(
            f"{plural(summary.failed, 'sample')} had no answer after every retry: "
            f"left for the next run, which asks only for those"
        )
    lines += [f"  {count:,} × {reason}" for reason, count in summary.reasons.items()]
    return lines


@click.command("pipeline")
@config_options(PipelineConfig)
@config_options(GenerateConfig, defaults=GENERATE_DEFAULTS)
@engine_options
@json_option
@pass_settings
def pipeline_command(settings: Settings, as_json, **options):
    """Run the main job end to end on the configured database and model.

    Import rankings, generate candidates and rank them with an AI judge, build
    pairs, report agreement, export a dataset version. Generation and judging
    use the global --model (default: the embedded SmolLM2); with --engine openai,
    generation asks the server at --api-base for the model it serves under that name.

    Example: preflab pipeline --out out/prefs
    """
    from preflab.db.engine import open_sessions
    from preflab.labelling.pipeline import run_pipeline

    config = build_config(PipelineConfig, options)
    generation = build_config(GenerateConfig, options)
    engine = engine_config(options, settings.model)
    report = {
        "database": settings.redacted_url(),
        **run_pipeline(
            open_sessions(settings.database_url),
            settings.model,
            config,
            generation,
            Reporter(not as_json),
            engine=engine,
        ),
    }
    echo_result(as_json, report, lambda: _pipeline_text(report, config.out_dir))


def _pipeline_text(report: dict, out_dir: Path) -> str:
    """A line per step of the main job: import, generate, judge, pairs, agreement, export."""
    imp, agree = report["import"], report["stats"]["agreement"]["all"]
    lines = [
        f"import: {imp['imported']:,} new rankings, {imp['duplicates']:,} already stored, "
        f"{imp['quarantined']:,} quarantined"
    ]
    if "generate" in report:
        gen = report["generate"]
        lines.append(
            f"generate: {gen['stored']:,} new candidates for {gen['prompts']:,} prompts with {gen['model']} "
            f"({gen['tokens_per_s'] or 0:,.0f} tokens/s)"
        )
        if gen["quarantined"] or gen["failed"]:
            lines.append(
                f"generate: {plural(gen['quarantined'], 'prompt')} quarantined by the server, "
                f"{plural(gen['failed'], 'sample')} left for the next run"
            )
        if line := engine_line(gen["engine"]):
            lines.append(f"generate: {line}")
    if "judge" in report:
        j, agree_h = report["judge"], report["judge"]["report"]["human_agreement"]
        line = f"judge: {j['judge']} ranked {j['ranked']:,} prompts ({j['kept']:,} already ranked)"
        if agree_h["pairwise_agreement"] is not None:
            line += (
                f"; agrees with humans on {agree_h['pairwise_agreement']:.3f} of "
                f"{agree_h['shared_pairs']:,} pairs over {agree_h['prompts']:,} prompts"
            )
        lines.append(line)
    lines.append(f"pairs: {report['pairs']['pairs']:,} comparisons from {report['pairs']['rankings']:,} rankings")
    if agree["pairwise_agreement"] is not None:
        lines.append(
            f"agreement: {agree['pairwise_agreement']:.3f} on {agree['shared_pairs']:,} shared pairs "
            f"(Kendall tau-b {agree['kendall_tau']:.3f}) over {agree['prompts']:,} prompts"
        )
    export = report["export"]
    left_out = sum(export.get("left_out_by_kind", {}).values())
    lines.append(
        f"export: {export['train']:,} train / {export['test']:,} test pairs → {out_dir} "
        f"({export['name']}; annotators {export.get('annotators', 'any')}, "
        f"{plural(left_out, 'judge pair')} left out, {export.get('contradicting_pairs', 0):,} contradicting)"
    )
    return "\n".join(lines)
