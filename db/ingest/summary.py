"""What a JSON Lines import counts (`ImportSummary`): what it did with each line it read, batch by batch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ImportSummary:
    """What an import did with each line it read: read = imported + duplicates + quarantined + blank."""

    read: int = 0
    imported: int = 0
    duplicates: int = 0
    quarantined: int = 0
    blank: int = 0
    prompts: int = 0
    candidates: int = 0
    retried: int = 0  # transactions run again after losing a race with another writer
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def all_quarantined(self) -> bool:
        """Records were read and every one was quarantined: the exit status is `EXIT_ALL_QUARANTINED`."""
        return self.quarantined > 0 and self.imported == 0 and self.duplicates == 0

    def add(self, other: ImportSummary) -> None:
        for name in ("read", "imported", "duplicates", "quarantined", "blank", "prompts", "candidates", "retried"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for reason, n in other.reasons.items():
            self.reasons[reason] = self.reasons.get(reason, 0) + n

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
