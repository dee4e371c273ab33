"""`preflab import dataset`: a public preference dataset's rows into rankings, a batch per transaction.

Every row is stored raw (`raw_records`, source `import:<format>`, locator `<split>:<index>`) before
it is parsed; a row that cannot be used is quarantined with its reason and the rest go on. A
ranking is identified by its format's annotator and the dataset's own row id where it has one,
else by what it means (`preflab.db.ingest.identity`), so importing a dataset twice adds nothing.
Rankings are written by the one ranking writer (`preflab.db.ingest.writer.write_rankings`), as JSON
Lines rankings are.

Before anything is written the first rows are read: `--format auto` picks the format from them;
a named format none of them can be read as stops the import with one line naming the format whose
columns they fit (when another one does). A format whose rankings span rows (oasst2's trees) has its
grouping column read first, alone (`_split_groups`): a group whose rows are not together, or that
`--limit` cuts, is quarantined whole, and a note (`DatasetSummary.notes`, on stderr) says how to fix
the file.

Who ranked is the format's (`Format.kind`, as the dataset card says), unless `--annotator` and
`--annotator-kind` say otherwise; where the format cannot know (trl), the summary's `assumed` says what
was assumed. What the rankings are by is the format's too (`Format.criteria`: one ranking per row and
criterion): `--criterion NAME` keeps one of a format's several (or names hh-rlhf's subset), and where the
source's file or folder name says it (`Format.subsets`: hh-rlhf's `harmless-base`), the summary's
`assumed_criterion` says what was assumed. A reply a format sets aside (an empty one beside enough
others) is stored raw alone, as `<split>:<index>/<its name>`, and quarantined; a row quarantined earlier
in the same import, met again, is counted a duplicate, as a ranking met again is.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import chain, islice
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter, plural
from preflab.db.ingest.batching import capped_batches
from preflab.db.ingest.datasets.base import Format
from preflab.db.ingest.datasets.batch import Parsed, import_rows, parse_batch
from preflab.db.ingest.datasets.formats import (
    FORMATS,
    PEEK_ROWS,
    Refusals,
    Refused,
    columns,
    detect,
    format_options,
    readable,
    split_groups,
    units,
)
from preflab.db.ingest.datasets.rows import Row
from preflab.db.ingest.datasets.sources import column_values, open_source
from preflab.db.ingest.datasets.summary import DatasetSummary, assumed_notes, once
from preflab.db.ingest.records import LIMITS, criterion_name, unstorable_text
from preflab.db.ingest.upkeep import cycles_unchecked, sample_grown_tables
from preflab.db.models import OVERALL
from preflab.db.overlap import aside, commit_behind
from preflab.errors import InputError, Invalid

__all__ = ["DatasetImportSettings", "DatasetSummary", "import_dataset"]

BATCH_ROWS = 5000
# A batch's rows are held parsed, several times their size: 5,000 UltraFeedback rows of 7 kB took
# 300 MB at the peak (bench/README.md, issue 30), so long rows make shorter batches.
BATCH_BYTES = 24 * 2**20
# A first read of a file this big runs in a child process (`_read_aside`) while up to AHEAD_BATCHES are parsed.
ASIDE_BYTES = 16 * 2**20
AHEAD_BATCHES, AHEAD_BYTES = 8, 2 * BATCH_BYTES


@dataclass
class DatasetImportSettings:
    """What `preflab import dataset` reads, and how (its options are generated from these fields).

    `criterion` is a format option: a format that takes it names it in its `Format.options` (field name ->
    default), and `parse` receives it as a keyword argument (`parse(row, criterion="honesty")`); a criterion
    the format does not give stops the import before anything is read.
    """

    format: str = field(
        default="auto",
        metadata={
            "help": "The dataset's format; auto picks it from the first rows' columns.",
            "choices": ("auto", *FORMATS),
        },
    )
    split: str | None = field(default=None, metadata={"help": "Only this split (default: every split)."})
    limit: int | None = field(default=None, metadata={"help": "Read at most this many rows."})
    criterion: str | None = field(
        default=None,
        metadata={
            "help": "Keep this criterion alone where a format gives several (ultrafeedback: overall, helpfulness, "
            "honesty, instruction_following, truthfulness, or fine_grained; pku-saferlhf: helpfulness, "
            "harmlessness; helpsteer2: its five attributes); hh-rlhf: the subset the file comes from "
            "(helpfulness or harmlessness). Default: every criterion the format gives.",
            "metavar": "NAME",
        },
    )
    annotator: str | None = field(
        default=None, metadata={"help": "Store every ranking under this annotator name instead of the format's."}
    )
    annotator_kind: str | None = field(
        default=None,
        metadata={
            "help": "Who ranked: people (human) or a model (ai), instead of what the format says.",
            "choices": ("human", "ai"),
        },
    )
    batch_rows: int = field(
        default=BATCH_ROWS,
        metadata={
            "help": "Rows per transaction: a crash loses, and a conflict with another writer redoes, at most this many."
        },
    )

    def __post_init__(self):
        if self.format != "auto" and self.format not in FORMATS:
            raise InputError(f"unknown format {self.format!r} (expected auto, {', '.join(FORMATS)})")
        if self.limit is not None and self.limit < 1:
            raise InputError("--limit must be at least 1")
        if self.batch_rows < 1:
            raise InputError("--batch-rows must be at least 1")
        if self.annotator is not None and (
            not self.annotator.strip() or len(self.annotator) > LIMITS["annotator"] or unstorable_text(self.annotator)
        ):
            raise InputError(
                f"--annotator must be a name of 1 to {LIMITS['annotator']} characters the database can store"
            )
        if self.criterion is not None:
            try:
                criterion_name(self.criterion, "--criterion")
            except Invalid as exc:
                raise InputError(str(exc)) from None


def import_dataset(
    sessions: sessionmaker[Session], source: str, settings: DatasetImportSettings, reporter: Reporter = SILENT
) -> DatasetSummary:
    """Import a dataset's rows as rankings, a batch of rows per transaction.

    Args:
        source: a .jsonl/.json/.parquet file, a folder (save_to_disk, or data files), or a Hub dataset id.

    Raises:
        InputError: the source cannot be read (the batches before a damaged part are kept), no format
            fits it (`auto`), the named format reads none of the first rows while another fits them,
            or `--criterion` names a criterion the format does not give.
    """
    opened = open_source(source, settings.split)
    rows = opened.rows if settings.limit is None else islice(opened.rows, settings.limit)
    head = list(islice(rows, PEEK_ROWS))
    fmt = _chosen_format(settings.format, head, source)
    criterion, assumed = _criterion(fmt, settings.criterion, source)
    options = format_options(fmt, {"criterion": criterion})
    total = min(opened.total, settings.limit or opened.total) if opened.total else settings.limit
    summary = DatasetSummary(fmt.name, assumed_criterion=assumed)
    with (
        reporter.progress(f"importing {fmt.name}", total) as advance,
        cycles_unchecked(),
        aside(_split_groups, fmt, source, settings, fork=_read_aside(fmt, source)) as first_read,
    ):
        parsed = (
            parse_batch(batch, fmt, options, settings.annotator, settings.annotator_kind)
            for batch in capped_batches(
                units(fmt, chain(head, rows)), settings.batch_rows, BATCH_BYTES, size=_unit_bytes, rows=len
            )
        )
        batches = once(_refused(_ahead(parsed, first_read.done), fmt, first_read))
        written = 0

        def done(_batch: list[Parsed], result: DatasetSummary, retries: int) -> None:
            nonlocal written
            written += 1
            sample_grown_tables(sessions, written)
            result.retried = retries
            summary.add(result)
            advance(result.rows)

        try:
            commit_behind(
                sessions, batches, lambda session, batch: import_rows(session, batch, fmt, opened.origin), done
            )
        except InputError as exc:
            raise InputError(f"{exc}; the {plural(summary.rows, 'row')} before it are stored") from None
        if apart := first_read.result().apart:
            are = "is" if apart == 1 else "are"
            summary.notes.append(
                f"{plural(apart, fmt.group_name)} of {source} {are} not together, so their rows "
                f"are quarantined and none of their rankings stored: sort the file by "
                f"{fmt.group_by} and import it again"
            )
    summary.notes += assumed_notes(summary)
    for line in summary.notes:
        reporter.note(line)
    return summary


def _split_groups(fmt: Format, source: str, settings: DatasetImportSettings) -> Refused:
    """The groups of rows (oasst2's trees) that are not together, or that `--limit` cuts: a first read.

    Only the grouping column is read (one set of keys in memory). Refusing the later runs of a group
    alone would not do: the run read first cannot know that more of it follows, and would store rankings
    missing their later replies, which an import of the sorted file could not complete.
    """
    if fmt.group_by is None:
        return Refused()
    values = column_values(source, settings.split, fmt.group_by)
    if settings.limit is not None:
        values = islice(values, settings.limit + 1)
    return split_groups(fmt, _until_damaged(values), settings.limit)


def _read_aside(fmt: Format, source: str) -> bool:
    """Whether the first read is worth a child process: a grouped format's big file, read row by row.

    A Parquet file's one column is read in a moment; 100,000 oasst2 messages as JSON Lines (94 MB) took
    0.45 s, which the first batches' reading and parsing now overlap (bench/README.md, issue 30).
    """
    path = Path(source)
    return (
        fmt.group_by is not None
        and path.is_file()
        and not path.name.lower().endswith(".parquet")
        and path.stat().st_size >= ASIDE_BYTES
    )


def _ahead(parsed: Iterator[list[Parsed]], ready: Callable[[], bool]) -> Iterator[list[Parsed]]:
    """The parsed batches, reading ahead while the first read runs aside (`ready()` not yet true).

    At most AHEAD_BATCHES, or AHEAD_BYTES of rows, are held: the first read of a file far bigger than the
    bench's takes longer than reading that much.
    """
    held: deque[list[Parsed]] = deque()
    weight = 0
    for batch in parsed:
        held.append(batch)
        weight += sum(len(row.payload) for unit, _ in batch for row in unit)
        if len(held) >= AHEAD_BATCHES or weight >= AHEAD_BYTES or ready():
            break
    batch = None
    while held:
        yield held.popleft()
    yield from parsed


def _refused(parsed: Iterator[list[Parsed]], fmt: Format, first_read) -> Iterator[list[Parsed]]:
    """The parsed batches, each unit of a group the first read refused (or met again) quarantined whole."""
    refusals = None
    for batch in parsed:
        if refusals is None:  # the first read's result, waited for once the first batch is there
            refusals = Refusals(fmt, first_read.result())
        yield [
            (unit, Invalid(reason)) if (reason := refusals.reason(unit)) else (unit, records) for unit, records in batch
        ]


def _until_damaged(values: Iterator[Any]) -> Iterator[Any]:
    """The values read before a damaged part (the import itself stops there, saying so)."""
    try:
        yield from values
    except InputError:
        return


def _chosen_format(name: str, head: list[Row], source: str) -> Format:
    if name == "auto":
        if not head:
            raise InputError(f"{source} holds no rows to pick a format from: name one with --format")
        found = detect(head)
        if found is None:
            have = ", ".join(sorted(columns(head))[:12]) or "none: no row is a JSON object"
            raise InputError(
                f"no format fits the columns of {source} ({have}): name one with --format ({', '.join(FORMATS)})"
            )
        return found
    fmt = FORMATS[name]
    read, reason = readable(fmt, head)
    missing = sorted(fmt.columns - columns(head))
    if missing:
        reason = f"they have no {', '.join(missing)} column{'s' if len(missing) > 1 else ''}"
    if head and not read:
        other = detect(head, exclude=fmt, readable_only=True)
        if other is not None:
            raise InputError(
                f"none of the first {plural(len(head), 'row')} of {source} can be read as {fmt.name} "
                f"({reason}); they are {other.name} rows: use --format {other.name}"
            )
    return fmt


def _criterion(fmt: Format, given: str | None, source: str) -> tuple[str | None, dict[str, str] | None]:
    """The criterion to keep (None: every one the format gives), and what was assumed, where it was.

    Raises InputError for a criterion the format does not give.
    """
    if given is not None and given not in fmt.offered:
        if fmt.offered == (OVERALL,):
            raise InputError(
                f"--criterion {given}: {fmt.name} rows give only overall rankings, so there is no {given} to keep"
            )
        raise InputError(f"--criterion {given}: {fmt.name} gives no such criterion (it gives {', '.join(fmt.offered)})")
    if given is not None or not fmt.subsets:
        return given, None
    path = Path(source)
    if not path.exists():  # a Hub id names no subset (Anthropic/hh-rlhf holds them all)
        return None, None
    path = path.resolve()
    for name in (path.name, path.parent.name):  # the file's name, then its folder's (helpful-base/train.jsonl.gz)
        for prefix, criterion in fmt.subsets.items():
            if name.lower().startswith(prefix):
                return criterion, {
                    "criterion": criterion,
                    "why": f"{name!r} is the name of one of {fmt.name}'s {prefix}* subsets",
                    "override": f"--criterion {'|'.join(fmt.offered)}",
                }
    return None, None


def _unit_bytes(unit: list[Row]) -> int:
    """A unit's payload: a batch of long rows is cut short, as their parsed records weigh several times more."""
    return sum(len(row.payload) for row in unit)
