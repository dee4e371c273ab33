"""Gold answers: prompts whose ranking is known, stored apart from the rankings.

A gold file is JSON Lines in the ranking import's format, without an annotator:
`{"prompt": …, "responses": [...], "ranking": [[0], [2, 1]]}`: tiers of response
indices, best first (a tier of several is a tie). Gold answers measure
annotators (`preflab annotators`); their prompts are never built into pairs, so
they never reach a training set. A gold file is all or nothing: the first bad
line stops it with one sentence, before anything is stored. A gold line may name
its `criterion` (`overall` by default), as a ranking does: a prompt has at most one
gold answer per criterion, and rankings are measured against their criterion's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from preflab.db.conversation import prompt_columns, reply_columns
from preflab.db.ingest.lines import open_input, read_lines
from preflab.db.ingest.records import RankingRecord, load_object, parse_ranking
from preflab.db.models import OVERALL, GoldAnswer
from preflab.db.store import ensure_candidates, ensure_criteria, ensure_prompts
from preflab.errors import InputError, Invalid

GOLD_SOURCE = "gold"
_PLACEHOLDER = "gold"  # parse_ranking wants an annotator; a gold line has none


def parse_gold(line: str | bytes) -> RankingRecord:
    """One gold line, checked as an imported ranking is; raises Invalid with the reason."""
    data = load_object(line)
    if "annotator" in data or "annotator_kind" in data:
        raise Invalid("a gold answer has no annotator (drop 'annotator' and 'annotator_kind')")
    record = parse_ranking(json.dumps(dict(data, annotator=_PLACEHOLDER)))
    if len(record.tiers) < 2:
        raise Invalid("the ranking has a single tier, so it orders nothing (a gold answer needs two or more)")
    return record


def read_gold(path: str | Path) -> list[RankingRecord]:
    """Every gold answer of a file; raises InputError naming the first bad line (nothing is stored)."""
    records: list[RankingRecord] = []
    seen: dict[tuple[str, str], int] = {}
    with open_input(path) as handle:
        for line in read_lines(handle, path):
            if not line.data.strip():
                continue
            try:
                record = parse_gold(line.data)
            except Invalid as exc:
                raise InputError(f"{Path(path).name} line {line.number:,}: {exc}; no gold answer was stored") from None
            key = (record.prompt_hash, record.criterion)
            if key in seen:
                raise InputError(
                    f"{Path(path).name} line {line.number:,}: the prompt of line "
                    f"{seen[key]:,} again (one gold answer per prompt and criterion); "
                    "no gold answer was stored"
                )
            seen[key] = line.number
            records.append(record)
    if not records:
        raise InputError(f"{Path(path).name} holds no gold answers")
    return records


@dataclass
class GoldSummary:
    new: int = 0
    unchanged: int = 0  # stored before with the same ranking
    prompt_ids: list[int] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"new": self.new, "unchanged": self.unchanged}


def store_gold(session: Session, records: list[RankingRecord], origin: str | None = None) -> GoldSummary:
    """Store gold answers (and their prompts and candidates) in the caller's transaction.

    A prompt whose stored gold answer ranks differently is refused: rankings
    measured against the old answer would silently change meaning.
    """
    prompt_ids = ensure_prompts(
        session,
        {r.prompt_hash: {**prompt_columns(r.prompt), "source": GOLD_SOURCE, "reference": r.reference} for r in records},
    )
    candidate_ids = ensure_candidates(
        session,
        {
            (prompt_ids[r.prompt_hash], h): {**reply_columns(turns), "model": model}
            for r in records
            for turns, h, model in zip(r.responses, r.response_hashes, r.models)
        },
    )
    stored = {
        (g.prompt_id, g.criterion): g
        for g in session.scalars(select(GoldAnswer).where(GoldAnswer.prompt_id.in_(set(prompt_ids.values()))))
    }
    summary = GoldSummary()
    for n, r in enumerate(records):
        pid = prompt_ids[r.prompt_hash]
        ids = [candidate_ids[(pid, h)] for h in r.response_hashes]
        tiers = [sorted(ids[i] for i in tier) for tier in r.tiers]
        summary.prompt_ids.append(pid)
        if (pid, r.criterion) in stored:
            known = stored[pid, r.criterion]
            if known.tiers != tiers:
                by = "" if r.criterion == OVERALL else f" by {r.criterion}"
                raise InputError(
                    f"gold answer {n + 1} ranks prompt {pid}{by} differently from its stored gold answer"
                    f" (from {known.origin or 'an earlier file'}); no gold answer was stored"
                )
            summary.unchanged += 1
            continue
        ensure_criteria(session, [r.criterion])
        session.add(GoldAnswer(prompt_id=pid, criterion=r.criterion, tiers=tiers, origin=origin))
        summary.new += 1
    session.flush()
    return summary


def gold_tiers(session: Session, criterion: str = OVERALL) -> dict[int, list[list[int]]]:
    """prompt id -> its gold ranking by `criterion` (candidate ids by tier, best first)."""
    query = select(GoldAnswer.prompt_id, GoldAnswer.tiers).where(GoldAnswer.criterion == criterion)
    return {pid: [list(t) for t in tiers] for pid, tiers in session.execute(query)}


def gold_prompt_ids(session: Session) -> set[int]:
    return set(session.scalars(select(GoldAnswer.prompt_id)))
