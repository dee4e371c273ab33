"""What the identity laws compare: a store's content, read without ids, and the files the same rows come in.

`snapshot` reads what a user gets from a store: the rankings (each as its annotator, prompt, replies with
their tiers, scores and models, details: never a database id, nor the order replies were shown in), the
pairs `pairs build` makes, the export's content hash and the leaderboard. People's pseudonyms are random
per store, so `snapshot` first gives every annotator the same one in every store (`pin_pseudonyms`).
`encodings` writes the same rows as each kind of file an import reads; `emptied` clears a store between
examples (its ids go on counting: ids are not what the laws compare).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select, update

from preflab.db import requests as _requests  # noqa: F401  (its table is on Base's metadata)
from preflab.db.export.dataset import ExportSettings
from preflab.db.export.job import export_dataset
from preflab.db.ingest.datasets.job import DatasetImportSettings, import_dataset
from preflab.db.ingest.jsonl import import_file, import_rankings_batch
from preflab.db.leaderboard.board import LeaderboardConfig, leaderboard
from preflab.db.models import Annotator, Base, Candidate, Comparison, Prompt, Ranking, RankingItem
from preflab.db.pairs.build import build_pairs
from preflab.errors import InputError
from tests.db.ingest.datasets.shapes_b import write_csv, write_parquet
from tests.db.ingest.law_rows import GROUPED

BOOTSTRAP = 20  # rounds: enough to compare intervals, cheap on a few battles


def same(got: dict[str, Any], want: dict[str, Any]) -> bool:
    """Two snapshots agree: exactly, but for the ratings, fitted in another order, to a millionth of a point."""
    import pytest

    assert {k: v for k, v in got.items() if k != "leaderboard"} == {k: v for k, v in want.items() if k != "leaderboard"}
    if isinstance(want["leaderboard"], str) or isinstance(got["leaderboard"], str):
        assert got["leaderboard"] == want["leaderboard"]
        return True

    def close(rating: dict[str, Any]) -> dict[str, Any]:
        return {k: pytest.approx(v, rel=1e-9, abs=1e-6) if isinstance(v, float) else v for k, v in rating.items()}

    assert got["leaderboard"] == {model: close(r) for model, r in want["leaderboard"].items()}
    return True


def emptied(sessions) -> None:
    """Delete every row of every table (the schema stays)."""
    with sessions.begin() as s:
        for table in reversed(Base.metadata.sorted_tables):
            s.execute(delete(table))


def pin_pseudonyms(session) -> None:
    """Every annotator's pseudonym made from its kind and name, the same in every store (stores draw them at random)."""
    for aid, kind, name in session.execute(select(Annotator.id, Annotator.kind, Annotator.name)).all():
        pseudonym = f"{kind}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"
        session.execute(update(Annotator).where(Annotator.id == aid).values(pseudonym=pseudonym))


def rankings(session) -> Counter:
    """The rankings, each as what it means (its criterion too): a Counter, so a ranking stored twice shows twice."""
    prompts = dict(session.execute(select(Prompt.id, Prompt.content_hash)).all())
    texts = dict(session.execute(select(Candidate.id, Candidate.content_hash)).all())
    who = {a: (k, n) for a, k, n in session.execute(select(Annotator.id, Annotator.kind, Annotator.name)).all()}
    items: dict[int, list] = {}
    for rid, cid, tier, score, model in session.execute(
        select(RankingItem.ranking_id, RankingItem.candidate_id, RankingItem.tier, RankingItem.score, RankingItem.model)
    ).all():
        items.setdefault(rid, []).append((texts[cid], tier, score, model))
    return Counter(
        (
            r.source,
            who[r.annotator_id],
            r.criterion,
            r.status,
            prompts[r.prompt_id],
            r.external_id,
            tuple(sorted(items.get(r.id, []), key=repr)),
            json.dumps(r.details, sort_keys=True),
        )
        for r in session.scalars(select(Ranking))
    )


def pairs(session) -> Counter:
    """The pairs `pairs build` made, each as its prompt, replies, margin, weight, annotator and criterion (not ids)."""
    prompts = dict(session.execute(select(Prompt.id, Prompt.content_hash)).all())
    texts = dict(session.execute(select(Candidate.id, Candidate.content_hash)).all())
    who = {
        rid: (kind, name)
        for rid, kind, name in session.execute(
            select(Ranking.id, Annotator.kind, Annotator.name).join(Annotator, Annotator.id == Ranking.annotator_id)
        ).all()
    }
    return Counter(
        (
            prompts[c.prompt_id],
            texts[c.chosen_id],
            texts[c.rejected_id],
            c.margin,
            c.weight,
            c.annotator_kind,
            who.get(c.ranking_id),
            c.criterion,
        )
        for c in session.scalars(select(Comparison))
    )


def board(session, bootstrap: int) -> dict[str, dict] | str:
    """The leaderboard's ratings by model (every field of each), or the sentence it stops with.

    By model: models of equal ratings are listed in the order the battles first named them.
    """
    try:
        return {r.model: vars(r) for r in leaderboard(session, LeaderboardConfig(bootstrap=bootstrap)).ratings}
    except InputError as exc:
        return str(exc)


def snapshot(sessions, out: Path, bootstrap: int = BOOTSTRAP) -> dict[str, Any]:
    """What the store holds, as a user reads it: rankings, pairs, the export's content hash, the leaderboard.

    `bootstrap`: the leaderboard's rounds (0: its fit alone).
    """
    with sessions.begin() as s:
        pin_pseudonyms(s)
        build_pairs(s)
    with sessions.begin() as s:
        got = {"rankings": rankings(s), "pairs": pairs(s), "leaderboard": board(s, bootstrap)}
    with sessions.begin() as s:
        try:
            got["export"] = export_dataset(s, out, ExportSettings(format="jsonl", annotators="any")).content_hash
        except InputError as exc:
            got["export"] = str(exc)
    return got


# --- the same rows as every kind of file -------------------------------------------------------


def as_int(value: Any) -> Any:
    """A whole float written as an integer (7.0 as 7), at any depth."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: as_int(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_int(v) for v in value]
    return value


def reordered(value: Any) -> Any:
    """Every object's keys in reverse order, at any depth."""
    if isinstance(value, dict):
        return {k: reordered(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reordered(v) for v in value]
    return value


def jsonl(path: Path, rows: list[Any], dump: Callable[[Any], str] = json.dumps) -> Path:
    path.write_text("".join(dump(row) + "\n" for row in rows), encoding="utf-8")
    return path


def saved(path: Path, rows: list[dict]) -> Path:
    import datasets

    datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


def hub_folder(path: Path, rows: list[dict]) -> Path:
    (path / "data").mkdir(parents=True)
    write_parquet(path / "data" / "train-00000-of-00001.parquet", rows)
    return path


def json_cells_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    """A CSV file whose list and object cells are their JSON, as pandas' `to_csv` cannot write them (it writes repr)."""
    import csv

    names = list(dict.fromkeys(key for row in rows for key in row))
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=names, restval="")
        writer.writeheader()
        writer.writerows(
            {k: json.dumps(v, ensure_ascii=False) if isinstance(v, (list, dict)) else v for k, v in row.items()}
            for row in rows
        )
    return path


def encodings(fmt: str, rows: list[Any], flat: bool, folder: Path) -> dict[str, Path]:
    """The rows as each file an import of `fmt` reads: name -> path (the first is the plain JSON Lines)."""
    folder.mkdir(parents=True, exist_ok=True)
    flat_rows = [r for group in rows for r in group] if fmt in GROUPED else rows
    out = {
        "jsonl": jsonl(folder / "plain.jsonl", flat_rows),
        "jsonl, compact, keys reversed, 7.0 as 7": jsonl(
            folder / "compact.jsonl",
            [as_int(reordered(r)) for r in flat_rows],
            lambda r: json.dumps(r, separators=(",", ":")),
        ),
        "jsonl, spaced, UTF-8 unescaped": jsonl(
            folder / "spaced.jsonl", flat_rows, lambda r: json.dumps(r, ensure_ascii=False, separators=(" ,  ", " : "))
        ),
    }
    if fmt == "rankings":
        return out
    out["parquet"] = write_parquet(folder / "rows.parquet", flat_rows)
    if flat:
        out["csv"] = write_csv(folder / "rows.csv", flat_rows)
    else:  # a CSV cell holds a list only as its JSON (db/ingest/datasets/cells.py): the same rankings
        out["csv, lists as JSON"] = json_cells_csv(folder / "lists.csv", flat_rows)
    out["save_to_disk"] = saved(folder / "saved", flat_rows)
    out["hub folder"] = hub_folder(folder / "hub", flat_rows)
    return out


def imported(sessions, fmt: str, path: Path) -> int:
    """Import one file; returns the rankings it added."""
    if fmt == "rankings":
        return import_file(sessions, path, import_rankings_batch).imported
    return import_dataset(sessions, str(path), DatasetImportSettings(format=fmt)).rankings
