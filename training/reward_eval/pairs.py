"""What the bench knows of each held-out pair besides its texts: prompt, category, annotator kind, margin.

A pair's category is its prompt's: the prompt's `source` where one was given (the
`source` field of `import rankings` and `import prompts`: a category such as "chat"
or "safety"), else the dataset the prompt came from (`import:hh-rlhf`,
`import:rankings`, `label-studio`…: the source of its first ranking's raw record),
else where its first ranking came from (`judge`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from preflab.db.bulk import IN_CHUNK, in_values
from preflab.db.models import Prompt, Ranking, RawRecord

UNKNOWN = "(unknown)"


@dataclass
class PairFacts:
    """Per held-out pair, in the split's order."""

    prompt_ids: np.ndarray
    categories: np.ndarray  # str
    annotator_kinds: np.ndarray  # str: human | ai | mixed (an aggregated pair)
    margins: np.ndarray  # the export's margin: a score gap, or the number of tiers between the replies


def pair_facts(session: Session, split) -> PairFacts:
    """The facts of every pair of a dataset version's split (an export: it has `prompt_id`, `margin`…)."""
    prompt_ids = np.asarray(split["prompt_id"], dtype=np.int64)
    kinds = split["annotator_kind"] if "annotator_kind" in split.column_names else [None] * len(prompt_ids)
    margins = split["margin"] if "margin" in split.column_names else [None] * len(prompt_ids)
    category = prompt_categories(session, sorted(set(prompt_ids.tolist())))
    return PairFacts(
        prompt_ids=prompt_ids,
        categories=np.array([category.get(p, UNKNOWN) for p in prompt_ids.tolist()], dtype=object),
        annotator_kinds=np.array([k or UNKNOWN for k in kinds], dtype=object),
        margins=np.array([np.nan if m is None else m for m in margins], dtype=float),
    )


def prompt_categories(session: Session, prompt_ids: list[int]) -> dict[int, str]:
    """prompt id → its category (see the module's docstring)."""
    out: dict[int, str] = {}
    by_source = select(Prompt.id, Prompt.source).where(in_values(session, Prompt.id))
    first_ranking = (
        select(Ranking.prompt_id, Ranking.id, Ranking.source, RawRecord.source)
        .outerjoin(RawRecord, RawRecord.id == Ranking.raw_record_id)
        .where(in_values(session, Ranking.prompt_id))
        .order_by(Ranking.id)
    )
    for start in range(0, len(prompt_ids), IN_CHUNK):
        chunk = {"values": prompt_ids[start : start + IN_CHUNK]}
        out.update((pid, source) for pid, source in session.execute(by_source, chunk) if source)
        for pid, _, ranking_source, raw_source in session.execute(first_ranking, chunk):
            out.setdefault(pid, raw_source or ranking_source)
    return out
