"""What an import counts, batch by batch, and adds up into its summary.

`ImportCounts` holds what every import counts (duplicates, what it quarantined and why, the new prompts and
candidates, the batches retried) and adds one batch's counts to another's; `ImportSummary` is a JSON Lines
import's, and `DatasetSummary` (`preflab.db.ingest.datasets.summary`) a dataset import's, each with its own
counts on top.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar


@dataclass(kw_only=True)
class ImportCounts:
    """What every import counts. `add` sums every int field, and the counts by key of the fields in `BY_KEY`."""

    BY_KEY: ClassVar[tuple[str, ...]] = ("reasons",)

    duplicates: int = 0
    quarantined: int = 0
    prompts: int = 0  # new prompts
    candidates: int = 0  # new candidates
    retried: int = 0  # transactions run again after losing a race with another writer
    reasons: dict[str, int] = field(default_factory=dict)  # quarantine reason -> how many

    def add(self, other: ImportCounts) -> None:
        """Add another batch's counts to these."""
        for f in fields(self):
            mine = getattr(self, f.name)
            if type(mine) is int:
                setattr(self, f.name, mine + getattr(other, f.name))
        for name in self.BY_KEY:
            mine = getattr(self, name)
            for key, n in getattr(other, name).items():
                mine[key] = mine.get(key, 0) + n

    def count_quarantined(self, reason: str, n: int = 1) -> None:
        """Count `n` records quarantined for `reason`."""
        self.quarantined += n
        self.reasons[reason] = self.reasons.get(reason, 0) + n


@dataclass(kw_only=True)
class ImportSummary(ImportCounts):
    """What an import did with each line it read: read = imported + duplicates + quarantined + blank."""

    read: int = 0
    imported: int = 0
    blank: int = 0

    @property
    def all_quarantined(self) -> bool:
        """Records were read and every one was quarantined: the exit status is `EXIT_ALL_QUARANTINED`."""
        return self.quarantined > 0 and self.imported == 0 and self.duplicates == 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "read": self.read,
            "imported": self.imported,
            "duplicates": self.duplicates,
            "quarantined": self.quarantined,
            "blank": self.blank,
            "new_prompts": self.prompts,
            "new_candidates": self.candidates,
            "retried": self.retried,
        }
