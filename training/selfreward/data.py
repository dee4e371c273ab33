"""The preference pairs of one self-rewarding iteration, written as a dataset version.

The pairs come straight from the iteration's rankings, not from the shared
`comparisons` table (which `preflab pairs build` rebuilds for everything in the
store): the judge's rankings of the iteration's own prompts, plus, with
`--with-human`, people's rankings collected since the previous iteration. Per
ranking either the highest-against-lowest pair (a ranking whose candidates all
tie gives none) or every strict pair. The dataset is conversational (chat
messages), as the candidates were sampled through the chat template, split by
prompt like every preflab export, and written by the same writer
(`preflab.db.export.dataset.write_dataset`).
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from preflab.db.models import Annotator, DatasetVersion, Prompt, Ranking, RankingItem, RankingStatus
from preflab.db.pairs.build import expand_tiers
from preflab.db.store import chunks
from preflab.errors import TrainingError

PAIR_CHOICES = ("best-vs-worst", "all")


@dataclass(frozen=True)
class Pair:
    prompt_id: int
    chosen_id: int
    rejected_id: int
    margin: float
    annotator_id: int
    kind: str  # ai | human


def ranking_pairs(
    tiers: list[list[int]], scores: dict[int, float | None], strategy: str
) -> list[tuple[int, int, float]]:
    """(chosen, rejected, margin) of one ranking: highest vs lowest, or every strict pair.

    The margin is the score gap where both candidates have a score, else the tier gap.
    """
    if len(tiers) < 2:
        return []  # everything tied: no preference
    expanded = list(expand_tiers(tiers, "best-vs-worst" if strategy == "best-vs-worst" else "all"))
    if strategy == "best-vs-worst":
        expanded = expanded[:1]  # one pair per prompt: the lowest ids of the top and bottom tiers
    out = []
    for chosen, rejected, gap in expanded:
        a, b = scores.get(chosen), scores.get(rejected)
        out.append((chosen, rejected, float(a - b) if a is not None and b is not None else float(gap)))
    return out


def rankings_by_id(
    session: Session, query
) -> dict[int, tuple[int, int, str, list[list[int]], dict[int, float | None]]]:
    """ranking id -> (prompt id, annotator id, kind, tiers, scores) for the rankings `query` selects."""
    rows = session.execute(
        select(
            Ranking.id,
            Ranking.prompt_id,
            Ranking.annotator_id,
            Annotator.kind,
            RankingItem.candidate_id,
            RankingItem.tier,
            RankingItem.score,
        )
        .join(Annotator, Annotator.id == Ranking.annotator_id)
        .join(RankingItem, RankingItem.ranking_id == Ranking.id)
        .where(Ranking.id.in_(query), RankingItem.tier.is_not(None))
        .order_by(Ranking.id, RankingItem.tier, RankingItem.candidate_id)
    )
    found: dict[int, tuple] = {}
    by_tier: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for rid, pid, aid, kind, cid, tier, score in rows:
        entry = found.setdefault(rid, (pid, aid, kind, [], {}))
        by_tier[rid][tier].append(cid)
        entry[4][cid] = score
    for rid, (*_, tiers, _scores) in found.items():
        tiers.extend(by_tier[rid][t] for t in sorted(by_tier[rid]))
    return found


def judge_pairs(session: Session, annotator_id: int, prompt_ids: list[int], strategy: str) -> list[Pair]:
    """The pairs of the judge's valid rankings of these prompts."""
    out: list[Pair] = []
    for part in chunks(sorted(prompt_ids)):
        query = select(Ranking.id).where(
            Ranking.annotator_id == annotator_id,
            Ranking.prompt_id.in_(part),
            Ranking.status == RankingStatus.valid.value,
        )
        for pid, aid, kind, tiers, scores in rankings_by_id(session, query).values():
            out += [Pair(pid, c, r, m, aid, kind) for c, r, m in ranking_pairs(tiers, scores, strategy)]
    return out


def human_pairs(session: Session, since: datetime | None, exclude: set[int], strategy: str) -> list[Pair]:
    """The pairs of people's valid rankings made after `since` (all of them when None), except on `exclude`."""
    query = (
        select(Ranking.id)
        .join(Annotator, Annotator.id == Ranking.annotator_id)
        .where(Annotator.kind == "human", Ranking.status == RankingStatus.valid.value)
    )
    if since is not None:
        query = query.where(Ranking.created_at > since)
    out: list[Pair] = []
    for pid, aid, kind, tiers, _ in rankings_by_id(session, query).values():
        if pid not in exclude:
            # People's tiers carry no scores: the margin is the tier gap.
            out += [Pair(pid, c, r, m, aid, kind) for c, r, m in ranking_pairs(tiers, {}, strategy)]
    return out


def write_iteration_dataset(
    session: Session,
    pairs: list[Pair],
    out_dir: str | Path,
    prefix: str,
    iteration: int,
    settings: dict,
    test_size: float,
    seed: int,
) -> DatasetVersion:
    """Write the pairs as a conversational dataset version (train/test by prompt), named `PREFIX-HASH8`.

    A prompt that already has a split (from an earlier export) keeps it; the
    others are split as `preflab export` splits them, and their split is stored.

    Args:
        settings: stored with the version (the loop, its iteration and pair strategy).
    """
    from preflab.db.export.dataset import ExportSettings, split_prompts, write_dataset

    if not pairs:
        raise TrainingError(f"iteration {iteration} has no preference pairs to train on")
    fresh: dict[int, str] = {}
    splits: dict[int, str] = {}
    for part in chunks(sorted({p.prompt_id for p in pairs})):
        for pid, digest, split in session.execute(
            select(Prompt.id, Prompt.content_hash, Prompt.split).where(Prompt.id.in_(part))
        ):
            if split is None:
                fresh[pid] = digest
            else:
                splits[pid] = split
    splits |= split_prompts(fresh, test_size, seed)
    if fresh:
        session.execute(update(Prompt), [{"id": pid, "split": splits[pid]} for pid in fresh])
    if all(splits[p.prompt_id] == "test" for p in pairs):
        raise TrainingError(f"iteration {iteration}: every pair falls on a held-out prompt; nothing to train on")
    kinds = sorted({p.kind for p in pairs})
    rows = [
        (p.prompt_id, p.chosen_id, p.rejected_id, p.margin, 1.0, p.kind, p.annotator_id)
        for p in sorted(pairs, key=lambda p: (p.prompt_id, p.chosen_id, p.rejected_id, p.annotator_id))
    ]
    shutil.rmtree(out_dir, ignore_errors=True)  # what a crashed attempt left
    return write_dataset(
        session,
        [rows],
        splits,
        out_dir,
        ExportSettings(format="disk", test_size=test_size, seed=seed, conversational=True),
        prefix=prefix,
        iteration=iteration,
        version_settings={
            "strategy": settings.get("pairs"),
            "aggregate": "none",
            "annotator_kind": "mixed" if len(kinds) > 1 else kinds[0],
            **settings,
        },
    )
