"""Generated stores of rankings by several criteria, and every criterion-aware result read back from one.

A world is a few prompts, each with replies by some of four models, ranked by people and AI judges, each
ranking by one criterion (ties and unranked replies included). `results` gathers, per criterion, what
the laws of tests/db/quality/test_criteria_laws.py compare: agreement, annotator quality, the
leaderboard, the judges' trust table and active selection's disagreement scores.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import select

from preflab.db.ingest.jsonl import import_file, import_rankings_batch
from preflab.db.models import Prompt
from preflab.errors import InputError
from tests.db.helpers import ranking_line, write_lines

OVERALL = "overall"
PEOPLE = ("person0", "person1", "person2")
JUDGES = ("judge0", "judge1")
MODELS = ("model-a", "model-b", "model-c", "model-d")
BOOTSTRAP = 20  # rounds of the leaderboard's and the trust table's intervals: a law holds whatever the count


@dataclass
class Ranked:
    prompt: str
    replies: list[str]
    models: list[str]
    annotator: str
    criterion: str
    tiers: list[list[int]]  # reply indices, best first

    @property
    def kind(self) -> str:
        return "ai" if self.annotator in JUDGES else "human"

    def line(self, n: int) -> str:
        extra = {} if self.criterion == OVERALL else {"criterion": self.criterion}
        return ranking_line(
            self.prompt, self.replies, self.tiers, self.annotator, self.kind, id=f"r{n}", model=self.models, **extra
        )


@dataclass
class Store:
    """What has been imported into one store so far."""

    sessions: Any
    folder: Path
    rankings: list[Ranked] = field(default_factory=list)
    prompts: int = 0

    def add(self, rankings: list[Ranked]) -> None:
        start = len(self.rankings)
        lines = [r.line(start + k) for k, r in enumerate(rankings)]
        path = write_lines(self.folder / f"rankings-{start}.jsonl", lines)
        import_file(self.sessions, path, partial(import_rankings_batch, source="import"))
        self.rankings += rankings


def tiers(rng: random.Random, n: int) -> list[list[int]]:
    """A ranking of some of n replies (mostly all), best first, ties about one time in four."""
    kept = rng.sample(range(n), n if rng.random() < 0.7 else rng.randint(1, n))
    out: list[list[int]] = []
    for item in kept:
        if out and rng.random() < 0.25:
            out[-1].append(item)
        else:
            out.append([item])
    return out


def world(rng: random.Random, store: Store, criteria: tuple[str, ...]) -> list[Ranked]:
    """A few new prompts, each ranked by a few annotators, each ranking by one of `criteria` (several by one
    annotator often)."""
    out = []
    for p in range(store.prompts, store.prompts + rng.randint(2, 4)):
        models = rng.sample(MODELS, rng.randint(2, len(MODELS)))
        replies = [f"reply of {m} to prompt {p}" for m in models]
        for who in rng.sample(PEOPLE + JUDGES, rng.randint(2, len(PEOPLE) + len(JUDGES))):
            for criterion in rng.sample(criteria, rng.randint(1, len(criteria))):
                out.append(Ranked(f"prompt {p}", replies, models, who, criterion, tiers(rng, len(models))))
        store.prompts = p + 1
    return out


def reversed_by(rankings: list[Ranked], criterion: str) -> list[Ranked]:
    """Each ranking again by the same annotator under `criterion`, its order turned round (ties kept)."""
    return [Ranked(r.prompt, r.replies, r.models, r.annotator, criterion, r.tiers[::-1]) for r in rankings]


def renamed(value, old: str, new: str):
    """A result as it reads with criterion `old` called `new`: in its fields and in the sentences that name it.

    A sentence names any criterion but `overall`, the one a store of a single order has ("3 rankings agree…",
    "3 rankings of helpfulness agree…").
    """
    if isinstance(value, dict):
        return {k: renamed(v, old, new) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(renamed(v, old, new) for v in value)
    if not isinstance(value, str):
        return value
    if value == old:
        return new
    if old == OVERALL:
        return value.replace(" rankings agree", f" rankings of {new} agree")
    return value.replace(f" {old}", f" {new}")


def relabel(sessions, old: str, new: str) -> None:
    """Rename a criterion in the store: its rankings and its row."""
    from sqlalchemy import update

    from preflab.db.models import Criterion, Ranking

    with sessions.begin() as session:
        session.execute(update(Ranking).where(Ranking.criterion == old).values(criterion=new))
        session.execute(update(Criterion).where(Criterion.name == old).values(name=new))


def results(sessions, criterion: str) -> dict[str, Any]:
    """Every result of one criterion."""
    from preflab.db.leaderboard.board import LeaderboardConfig, leaderboard
    from preflab.db.quality.agreement import agreement
    from preflab.db.quality.annotators import annotator_quality
    from preflab.labelling.active import SelectConfig
    from preflab.labelling.active_store import select_prompts
    from preflab.labelling.judges.trust import judge_trust

    with sessions() as session:
        prompts = list(session.scalars(select(Prompt.id)))
        out: dict[str, Any] = {
            "agreement": agreement(session, criterion),
            "annotators": [q.as_dict() for q in annotator_quality(session, criterion=criterion)],
            "trust": [r for r in judge_trust(session, BOOTSTRAP)["judges"] if r["criterion"] == criterion],
        }
        try:
            board = leaderboard(session, LeaderboardConfig(bootstrap=BOOTSTRAP, criterion=criterion)).as_dict()
        except InputError as exc:  # fewer than two models met in this criterion's rankings
            board = str(exc)
        out["leaderboard"] = board
    try:
        chosen = select_prompts(
            sessions, prompts, SelectConfig(select="disagreement"), len(prompts), criterion=criterion
        )
        out["disagreement"] = {c.prompt_id: (c.score, c.reason) for c in chosen}
    except InputError as exc:  # no prompt has two AI rankings of this criterion
        out["disagreement"] = str(exc)
    return out
