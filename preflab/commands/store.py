"""Commands for the preference store: db, quarantine, pairs, stats, annotators, export (`import` is in imports.py)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click

from preflab.commands.options import build_config, config_options, echo_json, json_option, pass_settings
from preflab.console import plural
from preflab.db.engine import open_sessions
from preflab.db.export.dataset import ExportSettings
from preflab.db.pairs.build import AGGREGATES, KINDS, STRATEGIES
from preflab.db.quality.annotators import QualityConfig
from preflab.settings import Settings, secret

# --- db ---------------------------------------------------------------------------------


@click.group("db")
def db_group():
    """Create and migrate the database.

    Example: preflab db upgrade
    """


@db_group.command("upgrade")
@click.option("--revision", default="head", show_default=True, help="Migrate to this revision.")
@pass_settings
def db_upgrade(settings: Settings, revision):
    """Apply the migrations (a fresh database is created first), saying what they changed in the data.

    A SQLite file is migrated on first use anyway; Postgres only ever by this command.

    Example: PREFLAB_DATABASE_URL=postgresql://localhost/preflab preflab db upgrade
    """
    from preflab.db.engine import upgrade_database

    now, notes = upgrade_database(settings.database_url, revision)
    for note in notes:
        click.echo(note)
    click.echo(f"{settings.redacted_url()} is at revision {now}")


@db_group.command("current")
@pass_settings
def db_current(settings: Settings):
    """Show the database's schema revision and the newest one.

    Example: preflab db current
    """
    from preflab.db.engine import current_revision, head_revision, open_database

    engine = open_database(settings.database_url, ensure_schema=False, existing=True)
    click.echo(f"{settings.redacted_url()}: revision {current_revision(engine)} (newest {head_revision()})")


# --- quarantine -------------------------------------------------------------------------


@click.group("quarantine")
def quarantine_group():
    """Inspect records that could not be parsed.

    Example: preflab quarantine list
    """


@quarantine_group.command("list")
@click.option("--source", help="Only this source (import:rankings, import:prompts, label-studio…).")
@click.option("--limit", type=int, default=100, show_default=True, help="Show at most this many records.")
@json_option
@pass_settings
def quarantine_list(settings: Settings, source, limit, as_json):
    """List quarantined records, one line each with its reason.

    Example: preflab quarantine list --source import:rankings
    """
    from preflab.db.store import quarantined_records

    with open_sessions(settings.database_url, existing=True).begin() as session:
        rows = quarantined_records(session, source, limit + 1)
    more, rows = len(rows) > limit, rows[:limit]
    if more:  # never silently fewer than there are
        click.echo(f"the first {limit:,} quarantined records; there are more: see them with a larger --limit", err=True)
    if as_json:
        echo_json(rows)
        return
    for row in rows:
        where = f"{Path(row['origin']).name}:{row['locator']}" if row["origin"] else row["locator"]
        click.echo(f"#{row['id']} {row['source']} {where}: {row['reason']}")
    if not rows:
        click.echo("nothing is quarantined")


@quarantine_group.command("show")
@click.argument("record_id", metavar="ID", type=int)
@json_option
@pass_settings
def quarantine_show(settings: Settings, record_id, as_json):
    """Print a raw record exactly as it was received (bytes, then a newline).

    With --json: its details, the payload as text where it is UTF-8, else as base64.

    Example: preflab quarantine show 17 > line17.bin
    """
    from preflab.db.store import raw_record

    with open_sessions(settings.database_url, existing=True).begin() as session:
        record = raw_record(session, record_id)
    if as_json:
        echo_json(_payload_json(record))
        return
    sys.stdout.flush()
    sys.stdout.buffer.write(record["payload"] + b"\n")
    sys.stdout.buffer.flush()


def _payload_json(record: dict) -> dict:
    import base64

    data = record.pop("payload")
    try:
        return record | {"payload": data.decode("utf-8")}
    except UnicodeDecodeError:
        return record | {"payload_base64": base64.b64encode(data).decode("ascii")}


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
    if as_json:
        echo_json(summary.as_dict())
    else:
        how = "rebuilt in full" if summary.mode == "full" else f"{plural(summary.changed, 'ranking')} changed"
        click.echo(
            f"built {summary.pairs:,} comparisons from {summary.rankings:,} rankings ({how}; "
            f"strategy {strategy}, aggregate {aggregate}, annotators {annotator_kind})"
        )
        for pseudonym, reasons in (summary.excluded or {}).items():
            click.echo(f"left out {pseudonym}: {'; '.join(reasons)}")


# --- stats ------------------------------------------------------------------------------


@click.command("stats")
@click.option(
    "--judges",
    is_flag=True,
    help="Instead: which AI judge to trust, each against the people on the prompts both ranked.",
)
@json_option
@pass_settings
def stats_command(settings: Settings, judges, as_json):
    """Counts and inter-annotator agreement.

    Agreement is measured between annotators who ranked the same prompts:
    the pairwise agreement rate and Kendall's tau-b. What model servers were
    paid: the stored answers' tokens and cost by served model, and what each
    judge's and generator's runs sent and cost, in the currency the prices were
    given in (--price-in, --price-out, --currency). With --judges: one row per
    AI judge, best first, with its agreement with people (and a bootstrap 95%
    interval over the shared prompts, seed 0), Kendall's tau-b and position bias.

    Example: preflab stats --judges --json
    """
    from preflab.commands.text import judges_text, stats_text
    from preflab.db.quality.agreement import stats
    from preflab.db.requests import spend
    from preflab.labelling.judges.trust import judge_trust

    with open_sessions(settings.database_url, existing=True).begin() as session:
        report = judge_trust(session) if judges else {**stats(session), "spend": spend(session)}
    if as_json:
        echo_json(report)
    else:
        click.echo(judges_text(report) if judges else stats_text(report))


# --- annotators --------------------------------------------------------------------------


@click.command("annotators")
@config_options(QualityConfig)
@json_option
@pass_settings
def annotators_command(settings: Settings, as_json, **options):
    """Annotator quality: agreement with gold and with the others, untouched orders, time per task.

    One row per person, by pseudonym, with the flags the thresholds raise;
    `preflab pairs build --exclude-flagged` leaves the flagged ones out.

    Example: preflab annotators --min-gold-tau 0.5 --json
    """
    from preflab.commands.text import quality_text
    from preflab.db.quality.annotators import annotator_quality

    config = build_config(QualityConfig, options)
    with open_sessions(settings.database_url, existing=True).begin() as session:
        qualities = annotator_quality(session, config)
    if as_json:
        echo_json({"annotators": [q.as_dict() for q in qualities], "thresholds": dataclasses.asdict(config)})
    else:
        click.echo(quality_text(qualities))


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

    Example: preflab export out/prefs --format parquet --test-size 0.1
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
    if as_json:
        echo_json(info)
    else:
        click.echo(export_summary(info, out_dir))
