"""Helpers for the trl, hh-rlhf, nectar, shp and pku-saferlhf tests, beside those in shapes_b."""

from __future__ import annotations

from collections import Counter
from typing import Any

from sqlalchemy import select

from preflab.db.conversation import stored_reply
from preflab.db.models import Candidate, Comparison
from preflab.db.pairs.build import build_pairs
from tests.db.ingest.datasets.shapes_b import compact


def pair_counts(sessions) -> Counter[tuple[Any, Any, float]]:
    """The pairs `pairs build` makes of the stored rankings, (chosen, rejected, margin) -> how many.

    A Counter, not a sorted list: a multi-turn reply reads back as a tuple, which does not sort with text.
    """
    with sessions.begin() as s:
        build_pairs(s)
    with sessions.begin() as s:
        texts = {c.id: compact(stored_reply(c.text, c.messages)) for c in s.scalars(select(Candidate))}
        return Counter((texts[c.chosen_id], texts[c.rejected_id], c.margin) for c in s.scalars(select(Comparison)))
