"""Commands for the store itself: `db` (its schema), `quarantine` (what it could not read), `stats` and `annotators`.

Data in is `preflab.commands.imports`; data out (`pairs build`, `export`) is `preflab.commands.export`.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click

from preflab.commands.options import build_config, config_options, echo_json, echo_result, json_option, pass_settings
from preflab.db.engine import open_sessions
from preflab.db.quality.annotators import QualityConfig
from preflab.settings import Settings

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
    echo_result(as_json, rows, lambda: _quarantined_text(rows))


def _quarantined_text(rows: list[dict]) -> str:
    """One line per record: `#17 import:rankings r.jsonl:3: not JSON …`."""
    lines = []
    for row in rows:
        where = f"{Path(row['origin']).name}:{row['locator']}" if row["origin"] else row["locator"]
        lines.append(f"#{row['id']} {row['source']} {where}: {row['reason']}")
    return "\n".join(lines) or "nothing is quarantined"


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


# --- stats ------------------------------------------------------------------------------

criterion_option = click.option(
    "--criterion",
    metavar="NAME",
    help="Only the rankings of this criterion (helpfulness, harmlessness…); default: one block per criterion "
    "the rankings have.",
)


@click.command("stats")
@click.option(
    "--judges",
    is_flag=True,
    help="Instead: which AI judge to trust, each against the people on the prompts both ranked.",
)
@criterion_option
@json_option
@pass_settings
def stats_command(settings: Settings, judges, criterion, as_json):
    """Counts and inter-annotator agreement.

    Agreement is measured between annotators who ranked the same prompts:
    the pairwise agreement rate and Kendall's tau-b. What model servers were
    paid: the stored answers' tokens and cost by served model, and what each
    judge's and generator's runs sent and cost, in the currency the prices were
    given in (--price-in, --price-out, --currency). With --judges: one row per
    AI judge, best first, with its agreement with people (and a bootstrap 95%
    interval over the shared prompts, seed 0), Kendall's tau-b and position bias.
    Rankings are compared only within one criterion: agreement and the judges'
    rows come per criterion (helpfulness, harmlessness…), --criterion's alone.

    Example: preflab stats --judges --json
    """
    from preflab.commands.text import judges_text, stats_text
    from preflab.db.quality.agreement import criterion_stats
    from preflab.db.requests import spend
    from preflab.labelling.judges.trust import judge_trust

    with open_sessions(settings.database_url, existing=True).begin() as session:
        if judges:
            report = judge_trust(session, criterion=criterion)
        else:
            report = {**criterion_stats(session, criterion), "spend": spend(session)}
    echo_result(as_json, report, lambda: judges_text(report) if judges else stats_text(report))


# --- annotators --------------------------------------------------------------------------


@click.command("annotators")
@config_options(QualityConfig)
@criterion_option
@json_option
@pass_settings
def annotators_command(settings: Settings, criterion, as_json, **options):
    """Annotator quality: agreement with gold and with the others, untouched orders, time per task.

    One row per person, by pseudonym, with the flags the thresholds raise;
    `preflab pairs build --exclude-flagged` leaves the flagged ones out. A person
    is measured per criterion (helpfulness, harmlessness…: one block each, each
    row naming its criterion), against the others' rankings of that criterion
    and against its gold answers (a gold line names its criterion).

    Example: preflab annotators --min-gold-tau 0.5 --json
    """
    from preflab.commands.text import qualities_text
    from preflab.db.quality.annotators import annotator_quality_by_criterion

    config = build_config(QualityConfig, options)
    with open_sessions(settings.database_url, existing=True).begin() as session:
        qualities = annotator_quality_by_criterion(session, config, criterion)
    rows = [q.as_dict() for block in qualities.values() for q in block]
    data = {"annotators": rows, "thresholds": dataclasses.asdict(config)}
    echo_result(as_json, data, lambda: qualities_text(qualities))
