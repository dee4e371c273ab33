"""The `preflab import` commands: rankings, prompts and public preference datasets, read into the store."""

from __future__ import annotations

import inspect
import sys

import click

from preflab.commands.options import build_config, config_options, echo_result, json_option, pass_settings
from preflab.console import Reporter, plural
from preflab.db.engine import open_sessions
from preflab.db.ingest.datasets.job import DatasetImportSettings
from preflab.db.ingest.jsonl import BATCH_LINES
from preflab.db.models import OVERALL
from preflab.errors import EXIT_ALL_QUARANTINED
from preflab.settings import Settings


def exit_statuses(unit: str = "record", failure: str = "the file cannot be read or is not JSON Lines"):
    """Write an import's exit statuses into a command's help, as the paragraph before its example.

    Args:
        unit: what the import stores or quarantines one at a time (a file's records, a dataset's rows).
        failure: when it stops with 1, before writing anything.
    """
    paragraph = (
        f"Exit status: 0, also when some {unit}s are quarantined; 3 when every {unit} read was "
        f"quarantined (the summary is still printed); 1 when {failure} (nothing is written)."
    )

    def add(command):
        body, example = inspect.cleandoc(command.__doc__).rsplit("\n\nExample:", 1)
        command.__doc__ = f"{body}\n\n{paragraph}\n\nExample:{example}"
        return command

    return add


@click.group("import")
@exit_statuses()
def import_group():
    """Import rankings, prompts or a public preference dataset.

    Example: preflab import rankings rankings.jsonl
    """


batch_lines_option = click.option(
    "--batch-lines",
    type=click.IntRange(min=1),
    default=BATCH_LINES,
    show_default=True,
    help="Lines per transaction: a crash loses, and a conflict with another writer redoes, at most this many.",
)


def _read_text(summary, what: str) -> str:
    """`read 1,500 lines: imported 1,490 rankings, 3 quarantined, …`."""
    retried = f", {plural(summary.retried, 'batch', 'batches')} retried after a conflict" if summary.retried else ""
    return (
        f"read {plural(summary.read, 'line')}: imported {plural(summary.imported, what)}, "
        f"{summary.quarantined:,} quarantined, {plural(summary.duplicates, 'duplicate')}, "
        f"{summary.blank:,} blank ({plural(summary.prompts, 'new prompt')}, "
        f"{plural(summary.candidates, 'new candidate')}{retried})"
    )


def _hints(summary) -> list[str]:
    """Where to see what an import quarantined (on stderr, after its summary)."""
    return ["see them with: preflab quarantine list"] if summary.quarantined else []


def _run_import(settings: Settings, path: str, importer, what: str, as_json: bool, batch_lines: int):
    from preflab.db.ingest.jsonl import import_file

    summary = import_file(
        open_sessions(settings.database_url), path, importer, reporter=Reporter(not as_json), batch_lines=batch_lines
    )
    data = summary.as_dict() | {"reasons": summary.reasons}
    echo_result(as_json, data, lambda: _read_text(summary, what), _hints(summary))
    if summary.all_quarantined:
        sys.exit(EXIT_ALL_QUARANTINED)


@import_group.command("rankings")
@exit_statuses()
@click.argument("path", type=click.Path(dir_okay=False))
@batch_lines_option
@json_option
@pass_settings
def import_rankings(settings: Settings, path, batch_lines, as_json):
    """Import rankings from a JSON Lines file, one ranking per line.

    Each line: {"prompt": …, "responses": [...], "ranking": [[1], [0, 2]],
    "annotator": "alice", "annotator_kind": "human", "id": "batch7-0001"}, and
    optionally "criterion": "harmlessness" (what the order is by; default overall).
    Bad lines are quarantined with the reason and their exact bytes; re-importing
    adds nothing twice. The file may be gzip-, bzip2- or xz-compressed. A JSON
    array (one document, e.g. a Label Studio export) is refused before anything
    is written.

    Example: preflab import rankings rankings.jsonl
    """
    from preflab.db.ingest.jsonl import import_rankings_batch

    _run_import(settings, path, import_rankings_batch, "ranking", as_json, batch_lines)


@import_group.command("prompts")
@exit_statuses()
@click.argument("path", type=click.Path(dir_okay=False))
@batch_lines_option
@json_option
@pass_settings
def import_prompts(settings: Settings, path, batch_lines, as_json):
    """Import prompts (optionally with unranked responses) from JSON Lines.

    Each line: {"prompt": …, "responses": [...], "reference": …}; responses and
    reference are optional. Bad lines are quarantined as for `import rankings`.

    Example: preflab import prompts prompts.jsonl
    """
    from preflab.db.ingest.jsonl import import_prompts_batch

    _run_import(settings, path, import_prompts_batch, "prompt", as_json, batch_lines)


@import_group.command("dataset")
@exit_statuses(
    "row",
    "the source cannot be read, no format fits it, or the named format reads none of its first 100 rows "
    "while another does",
)
@click.argument("source")
@config_options(DatasetImportSettings)
@json_option
@pass_settings
def import_dataset_command(settings: Settings, source, as_json, **options):
    """Import a public preference dataset's rows as rankings.

    SOURCE is a .jsonl, .json, .parquet or .csv file, a folder written by save_to_disk,
    a folder of data files, or a Hugging Face Hub dataset id (read from the local
    cache under HF_HUB_OFFLINE=1). Formats: trl, hh-rlhf, ultrafeedback, arena,
    oasst2, helpsteer3, helpsteer2, shp, nectar, pku-saferlhf; auto picks one from
    the columns. Each row is stored raw first; a bad row is quarantined with its
    reason and the rest go on; importing the same rows again adds nothing.

    A dataset that rates several things gives one ranking per row and criterion
    (ultrafeedback's aspects, pku-saferlhf's helpfulness and harmlessness,
    helpsteer2's attributes); --criterion NAME keeps one, and for hh-rlhf names
    the subset (a helpful-* or harmless-* file or folder is recognised). The
    summary counts the new rankings by criterion.

    Example: preflab import dataset --format hh-rlhf Anthropic/hh-rlhf --split test --limit 1000
    """
    from preflab.commands.text import dataset_summary
    from preflab.db.ingest.datasets.job import import_dataset

    summary = import_dataset(
        open_sessions(settings.database_url),
        source,
        build_config(DatasetImportSettings, options),
        reporter=Reporter(not as_json),
    )
    data = summary.as_dict()
    echo_result(as_json, data, lambda: _dataset_text(dataset_summary(data), data["criteria"]), _hints(summary))
    if summary.all_quarantined:
        sys.exit(EXIT_ALL_QUARANTINED)


def _dataset_text(line: str, criteria: dict[str, int]) -> str:
    """The summary line, then the new rankings by criterion where any is not overall."""
    if set(criteria) <= {OVERALL}:
        return line
    return f"{line}\nnew rankings by criterion: " + ", ".join(f"{name} {n:,}" for name, n in criteria.items())
