"""The preference pairs of one self-rewarding iteration, written as a dataset version.

The pairs come straight from the iteration's rankings, not from the shared
`comparisons` table (which `preflab pairs build` rebuilds for everything in the
store): the judge's rankings of the iteration's own prompts, plus, with
`--with-human`, people's rankings collected since the previous iteration. Per
ranking either the highest-against-lowest pair (a ranking whose candidates all
tie gives none) or every strict pair. The dataset is conversational (chat
messages), as the candidates were sampled through the chat template, and split
by prompt like every preflab export.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from preflab.db.export import split_prompts
from preflab.db.models import Annotator, Candidate, DatasetVersion, Prompt, Ranking, RankingItem, RankingStatus
from preflab.db.pairs import expand_tiers
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


def ranking_pairs(tiers: list[list[int]], scores: dict[int, float | None], strategy: str) -> list[tuple[int, int, float]]:
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


def rankings_by_id(session: Session, query) -> dict[int, tuple[int, int, str, list[list[int]], dict[int, float | None]]]:
    """ranking id -> (prompt id, annotator id, kind, tiers, scores) for the rankings `query` selects."""
    rows = session.execute(
        select(Ranking.id, Ranking.prompt_id, Ranking.annotator_id, Annotator.kind, RankingItem.candidate_id,
               RankingItem.tier, RankingItem.score)
        .join(Annotator, Annotator.id == Ranking.annotator_id)
        .join(RankingItem, RankingItem.ranking_id == Ranking.id)
        .where(Ranking.id.in_(query), RankingItem.tier.is_not(None))
        .order_by(Ranking.id, RankingItem.tier, RankingItem.candidate_id))
    found: dict[int, tuple] = {}
    by_tier: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for rid, pid, aid, kind, cid, tier, score in rows:
        entry = found.setdefault(rid, (pid, aid, kind, [], {}))
        by_tier[rid][tier].append(cid)
        entry[4][cid] = score
    for rid, (pid, aid, kind, tiers, scores) in found.items():
        tiers.extend(by_tier[rid][t] for t in sorted(by_tier[rid]))
    return found


def judge_pairs(session: Session, annotator_id: int, prompt_ids: list[int], strategy: str) -> list[Pair]:
    """The pairs of the judge's valid rankings of these prompts."""
    out: list[Pair] = []
    for part in chunks(sorted(prompt_ids)):
        query = select(Ranking.id).where(Ranking.annotator_id == annotator_id, Ranking.prompt_id.in_(part),
                                         Ranking.status == RankingStatus.valid.value)
        for pid, aid, kind, tiers, scores in rankings_by_id(session, query).values():
            out += [Pair(pid, c, r, m, aid, kind) for c, r, m in ranking_pairs(tiers, scores, strategy)]
    return out


def human_pairs(session: Session, since: datetime | None, exclude: set[int], strategy: str) -> list[Pair]:
    """The pairs of people's valid rankings made after `since` (all of them when None), except on `exclude`."""
    query = (select(Ranking.id).join(Annotator, Annotator.id == Ranking.annotator_id)
             .where(Annotator.kind == "human", Ranking.status == RankingStatus.valid.value))
    if since is not None:
        query = query.where(Ranking.created_at > since)
    out: list[Pair] = []
    for pid, aid, kind, tiers, _ in rankings_by_id(session, query).values():
        if pid not in exclude:
            # People's tiers carry no scores: the margin is the tier gap.
            out += [Pair(pid, c, r, m, aid, kind) for c, r, m in ranking_pairs(tiers, {}, strategy)]
    return out


def _texts(session: Session, model, ids: set[int]) -> dict[int, tuple[str, str]]:
    out = {}
    for part in chunks(sorted(ids)):
        out.update((i, (t, h)) for i, t, h in session.execute(
            select(model.id, model.text, model.content_hash).where(model.id.in_(part))))
    return out


def write_iteration_dataset(session: Session, pairs: list[Pair], out_dir: str | Path, name: str, iteration: int,
                            settings: dict, test_size: float, seed: int) -> DatasetVersion:
    """Write the pairs as a `save_to_disk` DatasetDict (train/test by prompt) and record the version.

    A prompt that already has a split (from an earlier export) keeps it; the
    others are split as `preflab export` splits them, and their split is stored.
    """
    import datasets
    from datasets import Dataset, DatasetDict

    if not pairs:
        raise TrainingError(f"iteration {iteration} has no preference pairs to train on")
    prompts = _texts(session, Prompt, {p.prompt_id for p in pairs})
    candidates = _texts(session, Candidate, {c for p in pairs for c in (p.chosen_id, p.rejected_id)})
    pseudonyms = dict(session.execute(select(Annotator.id, Annotator.pseudonym).where(
        Annotator.id.in_({p.annotator_id for p in pairs}))).all())
    existing = {}
    for part in chunks(sorted(prompts)):
        existing.update(session.execute(select(Prompt.id, Prompt.split).where(
            Prompt.id.in_(part), Prompt.split.is_not(None))).all())
    fresh = {pid: h for pid, (_, h) in prompts.items() if pid not in existing}
    splits = {**split_prompts(fresh, test_size, seed), **existing}
    if fresh:
        session.execute(update(Prompt), [{"id": pid, "split": splits[pid]} for pid in fresh])

    rows: dict[str, list[dict]] = {"train": [], "test": []}
    identity = []
    for p in sorted(pairs, key=lambda p: (p.prompt_id, p.chosen_id, p.rejected_id, p.annotator_id)):
        split = "test" if splits[p.prompt_id] == "test" else "train"
        rows[split].append({
            "prompt": [{"role": "user", "content": prompts[p.prompt_id][0]}],
            "chosen": [{"role": "assistant", "content": candidates[p.chosen_id][0]}],
            "rejected": [{"role": "assistant", "content": candidates[p.rejected_id][0]}],
            "margin": p.margin, "prompt_id": p.prompt_id, "weight": 1.0, "annotator_kind": p.kind,
            "annotator": pseudonyms[p.annotator_id]})
        identity.append([split, prompts[p.prompt_id][1], candidates[p.chosen_id][1], candidates[p.rejected_id][1],
                         round(p.margin, 6), p.kind, pseudonyms[p.annotator_id]])
    if not rows["train"]:
        raise TrainingError(f"iteration {iteration}: every pair falls on a held-out prompt; nothing to train on")
    digest = hashlib.sha256(json.dumps(identity).encode()).hexdigest()

    out_dir = Path(out_dir)
    shutil.rmtree(out_dir, ignore_errors=True)  # what a crashed attempt left
    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # a few hundred rows need no bar on stderr
    try:
        DatasetDict({s: Dataset.from_list(r) for s, r in rows.items() if r}).save_to_disk(str(out_dir))
    finally:
        if bars:
            datasets.enable_progress_bars()
    version = DatasetVersion(
        name=f"{name}-{digest[:8]}", build_id=None,
        settings={"strategy": settings.get("pairs"), "aggregate": "none",
                  "annotator_kind": "mixed" if len({p.kind for p in pairs}) > 1 else pairs[0].kind,
                  "test_size": test_size, "seed": seed, "conversational": True, **settings},
        n_train=len(rows["train"]), n_test=len(rows["test"]), n_prompts=len(prompts), content_hash=digest,
        format="disk", path=str(out_dir.resolve()), iteration=iteration)
    session.add(version)
    session.flush()
    (out_dir / "preflab.json").write_text(json.dumps({
        "dataset_version": version.name, "content_hash": digest, "iteration": iteration,
        "counts": {"train": version.n_train, "test": version.n_test}, "settings": version.settings}, indent=2),
        encoding="utf-8")
    return version
