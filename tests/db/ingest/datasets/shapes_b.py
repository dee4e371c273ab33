"""Small files in public datasets' real shapes, and what an import made of them, read back plainly.

Shared by the ultrafeedback, arena, oasst2 and helpsteer3 tests. A ranking reads back as
`(prompt, tiers)` with each message list made compact: a lone user or assistant turn is its
text; anything longer is a tuple of "role: content" strings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from preflab.db.conversation import stored_prompt, stored_reply
from preflab.db.ingest.datasets.job import DatasetImportSettings, import_dataset
from preflab.db.models import Annotator, Candidate, Comparison, Prompt, Ranking, RawRecord, RawStatus
from preflab.db.pairs.build import build_pairs

# For the tests that need no second database: the import tests run on Postgres too.
sqlite_only = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    """A parquet file as the Hub serves one: columns inferred from the rows, missing struct fields null."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    """A CSV file as Kaggle serves arena-human-preference-55k's train.csv: a header, every field quoted as needed."""
    import csv

    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def compact(turns: list[dict[str, str]]) -> str | tuple[str, ...]:
    if len(turns) == 1 and turns[0]["role"] in ("user", "assistant"):
        return turns[0]["content"]
    return tuple(f"{t['role']}: {t['content']}" for t in turns)


def parsed(records) -> list[dict[str, Any]]:
    """`Format.parse`'s records, read plainly: the replies by tier, best first."""
    return [
        {
            "prompt": compact(r.prompt),
            "tiers": [[compact(r.responses[i]) for i in tier] for tier in r.tiers],
            "models": r.models,
            "scores": r.scores,
            "details": r.details,
            "annotator": r.annotator,
            "kind": r.kind,
            "external_id": r.external_id,
        }
        for r in records
    ]


def run_import(sessions, path: Path, fmt: str, **settings):
    return import_dataset(sessions, str(path), DatasetImportSettings(format=fmt, **settings))


def stored(sessions, criterion: str | None = None) -> list[dict[str, Any]]:
    """Every stored ranking (`criterion`: of that criterion only), in the order written: its prompt, replies by
    tier, scores and details."""
    with sessions.begin() as s:
        out = []
        query = select(Ranking).order_by(Ranking.id)
        for ranking in s.scalars(query if criterion is None else query.where(Ranking.criterion == criterion)):
            prompt = s.get(Prompt, ranking.prompt_id)
            replies = {c.id: c for c in s.scalars(select(Candidate).where(Candidate.prompt_id == prompt.id))}
            annotator = s.get(Annotator, ranking.annotator_id)
            out.append(
                {
                    "prompt": compact(stored_prompt(prompt.text, prompt.messages)),
                    "tiers": [
                        [compact(stored_reply(replies[c].text, replies[c].messages)) for c in tier]
                        for tier in ranking.tiers()
                    ],
                    "models": {
                        compact(stored_reply(replies[i.candidate_id].text, replies[i.candidate_id].messages)): replies[
                            i.candidate_id
                        ].model
                        for i in ranking.items
                    },
                    "scores": {
                        compact(stored_reply(replies[i.candidate_id].text, replies[i.candidate_id].messages)): i.score
                        for i in ranking.items
                    },
                    "details": ranking.details,
                    "annotator": (annotator.kind, annotator.name),
                    "external_id": ranking.external_id,
                }
            )
        return out


def quarantined(sessions) -> dict[str, str]:
    """Each quarantined raw record's locator ("train:3") -> its reason."""
    with sessions.begin() as s:
        return dict(
            s.execute(
                select(RawRecord.locator, RawRecord.reason).where(RawRecord.status == RawStatus.quarantined.value)
            ).all()
        )


def ordered(items) -> list:
    """Items in one order whatever they hold (texts and message tuples do not compare)."""
    return sorted(items, key=repr)


def pairs(sessions) -> list[tuple[Any, Any, float]]:
    """The pairs `pairs build` makes of the stored rankings: (chosen, rejected, margin), `ordered`."""
    with sessions.begin() as s:
        build_pairs(s)
    with sessions.begin() as s:
        texts = {c.id: compact(stored_reply(c.text, c.messages)) for c in s.scalars(select(Candidate))}
        return ordered((texts[c.chosen_id], texts[c.rejected_id], c.margin) for c in s.scalars(select(Comparison)))
