"""Commands that take data out of the store: `pairs build` (rankings into comparisons) and `export` (a dataset).

The store itself (`db`, `quarantine`, `stats`, `annotators`) is `preflab.commands.store`; `import` is
`preflab.commands.imports`.
"""

from __future__ import annotations

import click

from preflab.commands.options import build_config, config_options, echo_result, json_option, pass_settings
from preflab.console import plural
from preflab.db.engine import open_sessions
from preflab.db.export.dataset import ExportSettings
from preflab.db.pairs.build import AGGREGATES, KINDS, STRATEGIES
from preflab.db.quality.annotators import QualityConfig
from preflab.settings import Settings, secret

# --- pairs ------------------------------------------------------------------------------


@click.group("pairs")
def pairs_group():
    """Expand rankings into pairwise comparisons.

    Example: preflab pairs build --strategy all
    """


@pairs_group.command("build")
@click.option(
    "--strategy",
    type=click.Choice(STRATEGIES),
    default="all",
    show_default=True,
    help="Which pairs of a ranking to keep.",
)
@click.option(
    "--aggregate",
    type=click.Choice(AGGREGATES),
    default="none",
    show_default=True,
    help="Combine several annotators' rankings of a prompt.",
)
@click.option(
    "--annotator-kind",
    type=click.Choice(KINDS),
    default="any",
    show_default=True,
    help="Only rankings by people (human), by judges (ai), or by anyone.",
)
@click.option(
    "--full",
    is_flag=True,
    help="Rewrite every comparison, not only those of the rankings that changed since the last build.",
)
@click.option(
    "--exclude-flagged",
    is_flag=True,
    help="Leave out the rankings of annotators `preflab annotators` flags (the thresholds below).",
)
@click.option(
    "--min-agreement",
    type=float,
    metavar="TAU",
    help="Leave out annotators whose Kendall tau-b with gold or with the others' consensus is below TAU.",
)
@config_options(QualityConfig)
@json_option
@pass_settings
def pairs_build(
    settings: Settings, strategy, aggregate, annotator_kind, full, exclude_flagged, min_agreement, as_json, **options
):
    """Bring the comparisons up to date with the valid rankings (deterministic).

    Only the rankings that changed since the last build are expanded again; the
    result is the same as a full rebuild's. A first build, other settings than
    the last build's, or --full rebuild everything.

    Rankings of gold prompts never become pairs. Annotators left out, and why,
    are recorded on the build and on every export made from it.

    Example: preflab pairs build --aggregate borda --annotator-kind human --exclude-flagged
    """
    from preflab.db.pairs.build import build_pairs
    from preflab.db.quality.annotators import excluded_annotators
    from preflab.db.transactions import in_transaction

    config = build_config(QualityConfig, options)

    # One snapshot of the rankings, whatever imports commit meanwhile. Two builds at once
    # would each keep its own pairs: Postgres' serializable isolation fails one of them,
    # which is then run again on the other's result.
    summary = in_transaction(
        open_sessions(settings.database_url),
        lambda session: build_pairs(
            session,
            strategy,
            aggregate,
            annotator_kind,
            full=full,
            excluded=excluded_annotators(session, config, exclude_flagged, min_agreement),
        ),
        isolation="SERIALIZABLE",
    )
    echo_result(as_json, summary.as_dict(), lambda: _built_text(summary, strategy, aggregate, annotator_kind))


def _built_text(summary, strategy: str, aggregate: str, annotator_kind: str) -> str:
    """What `pairs build` did, and the annotators it left out."""
    how = "rebuilt in full" if summary.mode == "full" else f"{plural(summary.changed, 'ranking')} changed"
    lines = [
        f"built {summary.pairs:,} comparisons from {summary.rankings:,} rankings ({how}; "
        f"strategy {strategy}, aggregate {aggregate}, annotators {annotator_kind})"
    ]
    lines += [f"left out {pseudonym}: {'; '.join(reasons)}" for pseudonym, reasons in (summary.excluded or {}).items()]
    return "\n".join(lines)


# --- export -----------------------------------------------------------------------------


@click.command("export")
@click.argument("out_dir", type=click.Path(file_okay=False))
@config_options(ExportSettings)
@click.option("--name", help="Name of the dataset version (default: numbered, with the content hash).")
@click.option("--hub", "hub_repo", metavar="REPO", help="Also push to this Hugging Face Hub repo (needs HF_TOKEN).")
@json_option
@pass_settings
def export_command(settings: Settings, out_dir, name, hub_repo, as_json, **options):
    """Export comparisons as a Hugging Face dataset.

    The train/test split is by prompt: a prompt's pairs never straddle the splits.
    The texts are chat messages, as TRL expects (`prompt`: the conversation so far;
    `chosen`/`rejected`: the replies), unless --chat-template renders them as text.
    Pairs of several criteria need --criterion NAME (one of them) or --combine RULE.

    Example: preflab export out/prefs --format parquet --test-size 0.1

    Example: preflab export out/safe --combine lexicographic:harmlessness,helpfulness
    """
    from preflab.commands.text import export_summary
    from preflab.db.export.job import export_and_push, version_info
    from preflab.training.data import chat_tokenizer

    config, sessions = build_config(ExportSettings, options), open_sessions(settings.database_url, existing=True)
    version = export_and_push(
        sessions,
        out_dir,
        config,
        name=name,
        hub_repo=hub_repo,
        token=secret("HF_TOKEN") if hub_repo else None,
        tokenizer=chat_tokenizer(sessions, config.chat_template),
    )
    info = version_info(version)
    echo_result(as_json, info, lambda: export_summary(info, out_dir) + _chosen_text(info))


def _chosen_text(info: dict) -> str:
    """What `chosen` means in an export, for its summary: the criterion, or the rule and the pairs it dropped."""
    combine = info.get("combine")
    if combine:
        dropped = combine.get("dropped") or {}
        reasons = ", ".join(f"{n:,} {why}" for why, n in dropped.items())
        told = f"dropped {plural(sum(dropped.values()), 'pair')}: {reasons}" if dropped else "dropped no pair"
        return f"; criteria combined by {combine['rule']} ({told})"
    return f"; criterion {info['criterion']}" if info.get("criterion") else ""
