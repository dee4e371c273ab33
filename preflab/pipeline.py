"""`preflab pipeline`: the main job, end to end, on the configured database.

Steps, each the library function behind a CLI command: import the rankings
(the bundled sample unless `--rankings` is given), build pairs, report agreement,
export a dataset version. Re-running it is idempotent up to the export, which
records a new dataset version.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import click

from preflab.cli import echo_json, pass_settings
from preflab.settings import Settings, data_dir


def sample_rankings_path() -> Path:
    return Path(str(files("preflab.db.samples") / "rankings.jsonl"))


@click.command("pipeline")
@click.option("--rankings", type=click.Path(dir_okay=False), help="JSON Lines rankings (default: the bundled sample).")
@click.option("--out", type=click.Path(file_okay=False), help="Export folder (default: DATA_DIR/exports/latest).")
@click.option("--strategy", default="all", show_default=True, help="Pair strategy (see `preflab pairs build`).")
@click.option("--format", "fmt", default="disk", show_default=True, help="Export format (see `preflab export`).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary of every step.")
@pass_settings
def pipeline_command(settings: Settings, rankings, out, strategy, fmt, as_json):
    """Run the main job: import rankings, build pairs, report agreement, export.

    Example: preflab pipeline --out out/prefs
    """
    from preflab.db.agreement import stats
    from preflab.db.cli import open_sessions
    from preflab.db.export import ExportSettings, export_dataset
    from preflab.db.ingest import import_file, import_rankings_batch
    from preflab.db.pairs import build_pairs

    sessions = open_sessions(settings)
    rankings = rankings or sample_rankings_path()
    out = Path(out) if out else data_dir() / "exports" / "latest"
    report: dict = {"database": settings.redacted_url()}

    summary = import_file(sessions, rankings, import_rankings_batch)
    report["import"] = summary.as_dict()
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
    click.echo(f"pairs: {report['pairs']['pairs']:,} comparisons from {report['pairs']['rankings']:,} rankings")
    if agree["pairwise_agreement"] is not None:
        click.echo(f"agreement: {agree['pairwise_agreement']:.3f} on {agree['shared_pairs']:,} shared pairs "
                   f"(Kendall tau-b {agree['kendall_tau']:.3f}) over {agree['prompts']:,} prompts")
    click.echo(f"export: {report['export']['train']:,} train / {report['export']['test']:,} test pairs "
               f"→ {out} ({report['export']['name']})")
