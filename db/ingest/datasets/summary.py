"""What an import of a dataset counts (`DatasetSummary`), and the notes it says beside its summary line.

`DatasetSummary` holds the counts every import keeps (`preflab.db.ingest.summary.ImportCounts`) and its own.

Two things are counted here rather than by a format, because they span the import: a row quarantined
earlier in the same import and met again is a duplicate (`once`), as a ranking met again is, so the
summary's quarantined rows are the rows `preflab quarantine list` shows (a row stored before is listed
with this import's reason: `preflab.db.ingest.datasets.batch.listed_again`); and a reply a format set
aside (`RankingRecord.set_aside`: an empty one, or one a criterion leaves unrated), and a criterion that
gives no ranking for its row, are raw records of their own, `<split>:<index>/<name>`, identified by their
row and name (`part_digest`), so importing the row again quarantines nothing twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from preflab.console import plural
from preflab.db.ingest.datasets.arena import TIES, identical_battle
from preflab.db.ingest.records import RankingRecord
from preflab.db.ingest.summary import ImportCounts
from preflab.errors import Invalid

OVERRIDE = "--annotator NAME --annotator-kind human|ai"


# The --json keys, in the order the command has always printed them.
JSON_KEYS = (
    "format",
    "rows",
    "rankings",
    "ties",
    "rankings_with_ties",
    "identical_replies",
    "identical_ties",
    "duplicates",
    "quarantined",
    "quarantined_replies",
    "prompts",
    "candidates",
    "retried",
    "splits",
    "reasons",
    "assumed",
    "criteria",
    "quarantined_criteria",
    "assumed_criterion",
)


@dataclass
class DatasetSummary(ImportCounts):
    """What an import did with the rows it read.

    rows = the rows read; rankings = the new rankings; of them, ties = those one whole tie of two or more
    replies (one tier, which gives no pair), rankings_with_ties = those with any replies tied (the whole ties
    among them), identical_replies = Arena battles whose two models gave the same reply (a ranking of that one
    reply: a battle on the leaderboard, no pair; none of them counted in the ties above), identical_ties = those
    of them voted a tie; duplicates = rankings stored
    before (or twice in the source), and rows quarantined earlier in this import met again; quarantined = rows
    that could not be used; quarantined_replies = replies left out of their row's ranking and quarantined
    alone (an empty one, or one a criterion leaves unrated). A row may give no ranking (an oasst2 prompter
    message) or several. assumed: annotator -> {annotator_kind, rankings, why, override} where preflab
    assumed who ranked (the trl format does not say). criteria: criterion -> its new rankings (a row of a
    dataset that rates several things gives one ranking per criterion); quarantined_criteria = criteria of
    a row that gave it no ranking (too few rated replies, a broken rating), each quarantined alone while the
    row's others are stored; assumed_criterion: {criterion, why, override} where preflab took the criterion
    from the source's name (hh-rlhf's `helpful-base`), else None.
    """

    BY_KEY = ("splits", "reasons", "criteria")

    format: str
    rows: int = 0
    rankings: int = 0
    ties: int = 0
    rankings_with_ties: int = 0
    identical_replies: int = 0
    identical_ties: int = 0
    quarantined_replies: int = 0
    splits: dict[str, int] = field(default_factory=dict)
    assumed: dict[str, dict[str, Any]] = field(default_factory=dict)
    criteria: dict[str, int] = field(default_factory=dict)
    quarantined_criteria: int = 0
    assumed_criterion: dict[str, str] | None = None

    def __post_init__(self):
        # What to do about the file, one line each, said on stderr (`--json` has the reasons; not a field).
        self.notes: list[str] = []

    @property
    def all_quarantined(self) -> bool:
        """Rows were read and every one was quarantined: the exit status is `EXIT_ALL_QUARANTINED`."""
        return self.quarantined > 0 and self.quarantined == self.rows

    def add(self, other: DatasetSummary) -> None:
        super().add(other)
        for name, what in other.assumed.items():
            self.assumed.setdefault(name, {**what, "rankings": 0})["rankings"] += what["rankings"]

    def count_rankings(self, new: list[RankingRecord]) -> None:
        """Count the new rankings, the whole ties, the rankings with tied replies and the identical battles."""
        self.rankings += len(new)
        for record in new:
            self.criteria[record.criterion] = self.criteria.get(record.criterion, 0) + 1
            if identical_battle(record):  # one reply: no tied replies, whatever the vote
                self.identical_replies += 1
                self.identical_ties += record.details["winner"] in TIES
                continue
            self.ties += len(record.tiers) == 1
            self.rankings_with_ties += any(len(tier) > 1 for tier in record.tiers)

    def count_assumed(self, record: RankingRecord) -> None:
        """Count a ranking whose annotator preflab assumed (`record.assumed`: why)."""
        if record.assumed:
            self.assumed.setdefault(
                record.annotator,
                {"annotator_kind": record.kind, "rankings": 0, "why": record.assumed, "override": OVERRIDE},
            )["rankings"] += 1

    def as_dict(self) -> dict[str, Any]:
        counts = asdict(self)
        return {name: counts[name] for name in JSON_KEYS}


class Repeated(Invalid):
    """A unit of rows quarantined earlier in this import, met again: counted a duplicate, not quarantined twice."""


def part_digest(identity: str, name: str) -> str:
    """The identity of a part of a row stored alone: its ranking's (or row's) and its name's.

    A reply set aside takes its ranking's identity, what the row means (`preflab.db.ingest.identity`), so the
    same row in another file sets the same reply aside once; two rankings' identical empty replies are two.
    """
    return hashlib.sha256(f"{identity}/{name}".encode()).hexdigest()


def part_payload(value: Any) -> str:
    """A reply set aside, stored raw as its part of the row: JSON (a completion, an answer, or the text)."""
    return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY).decode()


def once(batches: Iterator[list[tuple[list[Any], Any]]]) -> Iterator[list[tuple[list[Any], Any]]]:
    """The parsed batches, in file order, with what this import quarantined before made a repeat.

    A unit every row of which was quarantined earlier in the import is `Repeated`; a reply set aside
    before (the same row met again) is not set aside twice. Only the quarantined are remembered.
    """
    seen: set[str] = set()
    for batch in batches:
        out = []
        for unit, records in batch:
            if isinstance(records, Invalid):
                digests = {row.digest for row in unit}
                if digests <= seen:
                    records = Repeated(str(records))
                seen |= digests
            else:
                for record in records:
                    if record.set_aside:
                        parts = [(part, part_digest(unit[0].digest, part[0])) for part in record.set_aside]
                        record.set_aside = [part for part, h in parts if h not in seen]
                        seen.update(h for _, h in parts)
            out.append((unit, records))
        yield out


def assumed_notes(summary: DatasetSummary) -> list[str]:
    """The lines said beside the summary: what preflab assumed, and the replies and criteria quarantined alone."""
    lines = []
    if summary.assumed_criterion:
        said = summary.assumed_criterion
        lines.append(
            f"assumed the rankings are by {said['criterion']} ({said['why']}); "
            f"say what they are by with {said['override']}"
        )
    assumed, replies, criteria = summary.assumed, summary.quarantined_replies, summary.quarantined_criteria
    for name, what in assumed.items():
        who = "an AI" if what["annotator_kind"] == "ai" else "people"
        lines.append(
            f"assumed {plural(what['rankings'], 'ranking')} {'is' if what['rankings'] == 1 else 'are'} "
            f"by {who}, stored under the {what['annotator_kind']} annotator {name!r} ({what['why']}); "
            f"say who ranked with {what['override']}"
        )
    if replies:
        lines.append(
            f"{plural(replies, 'reply', 'replies')} (empty, or unrated by a criterion) quarantined alone, "
            f"the rest of {'its row' if replies == 1 else 'their rows'} ranked without "
            f"{'it' if replies == 1 else 'them'}: see them with: preflab quarantine list"
        )
    if criteria:
        one = criteria == 1
        rest = "the row's other criteria" if one else "the rows' other criteria"
        lines.append(
            f"{plural(criteria, 'criterion', 'criteria')} gave no ranking for {'its row' if one else 'their rows'} "
            f"(too few rated replies, or a rating that cannot be read) and {'was' if one else 'were'} quarantined "
            f"alone, {rest} stored: see them with: preflab quarantine list"
        )
    return lines
