"""Commands for the preference store: db, import, quarantine, pairs, stats, export."""

from __future__ import annotations

from pathlib import Path

import click
from sqlalchemy import select

from preflab.console import Reporter, echo_json, pass_settings
from preflab.db.engine import open_sessions
from preflab.settings import Settings


def count_lines(path: str) -> int:
    from preflab.db.ingest import open_jsonl

    with open_jsonl(path) as handle:
        return sum(1 for line in handle if line.strip())


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
    """Apply the migrations (a fresh database is created first).

    Example: PREFLAB_DATABASE_URL=postgresql://localhost/preflab preflab db upgrade
    """
    from preflab.db.engine import current_revision, open_database, upgrade

    engine = open_database(settings.database_url, migrate=False)
    upgrade(engine, revision)
    click.echo(f"{settings.redacted_url()} is at revision {current_revision(engine)}")


@db_group.command("current")
@pass_settings
def db_current(settings: Settings):
    """Show the database's schema revision and the newest one.

    Example: preflab db current
    """
    from preflab.db.engine import current_revision, head_revision, open_database

    engine = open_database(settings.database_url, migrate=False)
    click.echo(f"{settings.redacted_url()}: revision {current_revision(engine)} (newest {head_revision()})")


# --- import -----------------------------------------------------------------------------

@click.group("import")
def import_group():
    """Import rankings or prompts from JSON Lines files.

    Example: preflab import rankings rankings.jsonl
    """


def _run_import(settings: Settings, path: str, importer, what: str, as_json: bool):
    from preflab.db.ingest import import_file

    sessions = open_sessions(settings.database_url)
    with Reporter(not as_json).progress(f"importing {what}", count_lines(path)) as advance:
        summary = import_file(sessions, path, importer, progress=advance)
    if as_json:
        echo_json(summary.as_dict() | {"reasons": summary.reasons})
        return
    click.echo(f"imported {summary.imported:,} {what}, {summary.quarantined:,} quarantined, "
               f"{summary.duplicates:,} duplicates ({summary.prompts:,} new prompts, "
               f"{summary.candidates:,} new candidates)")
    if summary.quarantined:
        click.echo("see them with: preflab quarantine list", err=True)


@import_group.command("rankings")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@pass_settings
def import_rankings(settings: Settings, path, as_json):
    """Import rankings from a JSON Lines file, one ranking per line.

    Each line: {"prompt": …, "responses": [...], "ranking": [[1], [0, 2]],
    "annotator": "alice", "annotator_kind": "human", "id": "batch7-0001"}.
    Bad lines are quarantined with the reason; re-importing adds nothing twice.

    Example: preflab import rankings rankings.jsonl
    """
    from preflab.db.ingest import import_rankings_batch

    _run_import(settings, path, import_rankings_batch, "rankings", as_json)


@import_group.command("prompts")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@pass_settings
def import_prompts(settings: Settings, path, as_json):
    """Import prompts (optionally with unranked responses) from JSON Lines.

    Each line: {"prompt": …, "responses": [...], "reference": …}; responses and
    reference are optional.

    Example: preflab import prompts prompts.jsonl
    """
    from preflab.db.ingest import import_prompts_batch

    _run_import(settings, path, import_prompts_batch, "prompts", as_json)


# --- quarantine -------------------------------------------------------------------------

@click.group("quarantine")
def quarantine_group():
    """Inspect records that could not be parsed.

    Example: preflab quarantine list
    """


@quarantine_group.command("list")
@click.option("--source", help="Only this source (import:rankings, import:prompts, label-studio…).")
@click.option("--limit", type=int, default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_settings
def quarantine_list(settings: Settings, source, limit, as_json):
    """List quarantined records, one line each with its reason.

    Example: preflab quarantine list --source import:rankings
    """
    from preflab.db.models import RawRecord

    query = select(RawRecord).where(RawRecord.status == "quarantined").order_by(RawRecord.id).limit(limit)
    if source:
        query = query.where(RawRecord.source == source)
    with open_sessions(settings.database_url).begin() as session:
        records = session.scalars(query).all()
        rows = [{"id": r.id, "source": r.source, "origin": r.origin, "locator": r.locator,
                 "reason": r.reason} for r in records]
    if as_json:
        echo_json(rows)
        return
    for row in rows:
        where = f"{Path(row['origin']).name}:{row['locator']}" if row["origin"] else row["locator"]
        click.echo(f"#{row['id']} {row['source']} {where}: {row['reason']}")
    if not rows:
        click.echo("nothing is quarantined")


# --- pairs ------------------------------------------------------------------------------

@click.group("pairs")
def pairs_group():
    """Expand rankings into pairwise comparisons.

    Example: preflab pairs build --strategy all
    """


@pairs_group.command("build")
@click.option("--strategy", type=click.Choice(["all", "adjacent", "best-vs-rest", "best-vs-worst"]),
              default="all", show_default=True, help="Which pairs of a ranking to keep.")
@click.option("--aggregate", type=click.Choice(["none", "majority", "borda", "bradley-terry"]),
              default="none", show_default=True, help="Combine several annotators' rankings of a prompt.")
@click.option("--annotator-kind", type=click.Choice(["human", "ai", "any"]), default="any", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@pass_settings
def pairs_build(settings: Settings, strategy, aggregate, annotator_kind, as_json):
    """Rebuild the comparisons from every valid ranking (deterministic).

    Example: preflab pairs build --aggregate borda --annotator-kind human
    """
    from preflab.db.pairs import build_pairs

    with open_sessions(settings.database_url).begin() as session:
        summary = build_pairs(session, strategy, aggregate, annotator_kind)
    if as_json:
        echo_json(summary.as_dict())
    else:
        click.echo(f"built {summary.pairs:,} comparisons from {summary.rankings:,} rankings "
                   f"(strategy {strategy}, aggregate {aggregate}, annotators {annotator_kind})")


# --- stats ------------------------------------------------------------------------------

@click.command("stats")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_settings
def stats_command(settings: Settings, as_json):
    """Counts, and agreement between annotators who ranked the same prompts.

    Example: preflab stats --json
    """
    from preflab.db.agreement import stats

    with open_sessions(settings.database_url).begin() as session:
        report = stats(session)
    if as_json:
        echo_json(report)
        return
    c = report["counts"]
    click.echo(f"prompts {c['prompts']:,} · candidates {c['candidates']:,} · comparisons {c['comparisons']:,}"
               f" · quarantined {c['quarantined']:,}")
    click.echo("rankings: " + ", ".join(f"{k} {v:,}" for k, v in c["rankings"].items()))
    click.echo("annotators: " + (", ".join(f"{k} {v:,}" for k, v in c["annotators"].items()) or "none"))
    click.echo(f"rankings identical to the order shown: {c['same_as_shown']:,}")
    for name, a in report["agreement"].items():
        if not a["ranking_pairs"]:
            continue
        rate = "n/a" if a["pairwise_agreement"] is None else f"{a['pairwise_agreement']:.3f}"
        tau = "n/a" if a["kendall_tau"] is None else f"{a['kendall_tau']:.3f}"
        click.echo(f"agreement {name}: {a['ranking_pairs']:,} ranking pairs, {a['shared_pairs']:,} shared pairs, "
                   f"pairwise agreement {rate}, Kendall tau-b {tau}")


# --- export -----------------------------------------------------------------------------

@click.command("export")
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["disk", "parquet", "jsonl"]), default="disk", show_default=True,
              help="disk: datasets.save_to_disk; parquet: data/{train,test}.parquet; jsonl: {train,test}.jsonl.")
@click.option("--test-size", type=float, default=0.1, show_default=True, help="Share of prompts in the test split.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the split by prompt.")
@click.option("--conversational", is_flag=True, help="Chat-message lists (as TRL expects) instead of plain text.")
@click.option("--name", help="Name of the dataset version (default: numbered, with the content hash).")
@click.option("--hub", "hub_repo", metavar="REPO", help="Also push to this Hugging Face Hub repo (needs HF_TOKEN).")
@click.option("--json", "as_json", is_flag=True, help="Print the dataset version as JSON.")
@pass_settings
def export_command(settings: Settings, out_dir, fmt, test_size, seed, conversational, name, hub_repo, as_json):
    """Export the comparisons as a Hugging Face dataset with train/test split by prompt.

    Example: preflab export out/prefs --format parquet --test-size 0.1
    """
    from preflab.db.export import ExportSettings, export_dataset, push_to_hub
    from preflab.db.models import DatasetVersion
    from preflab.errors import HubError
    from preflab.settings import secret

    sessions = open_sessions(settings.database_url)
    with sessions.begin() as session:
        version = export_dataset(session, out_dir, ExportSettings(fmt, test_size, seed, conversational), name)
        info = {"id": version.id, "name": version.name, "path": version.path, "format": version.format,
                "train": version.n_train, "test": version.n_test, "prompts": version.n_prompts,
                "content_hash": version.content_hash}
    if hub_repo:
        try:
            revision = push_to_hub(out_dir, hub_repo, secret("HF_TOKEN"))
        except HubError as exc:
            raise HubError(f"exported dataset version {info['name']} to {out_dir}, but {exc}") from None
        with sessions.begin() as session:
            row = session.get(DatasetVersion, info["id"])
            row.hub_repo, row.hub_revision = hub_repo, revision
        info |= {"hub_repo": hub_repo, "hub_revision": revision}
    if as_json:
        echo_json(info)
    else:
        click.echo(f"exported {info['train']:,} train and {info['test']:,} test pairs from {info['prompts']:,} prompts"
                   f" to {out_dir} as dataset version {info['name']}")
