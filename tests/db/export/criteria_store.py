"""Generated stores of rankings by several criteria, and the pairs an export of one writes, read by their texts.

`stores` draws rankings (a prompt, a criterion, an annotator, tiers of some of the prompt's replies); `stored`
imports them as JSON Lines into an emptied store and builds its pairs; `criterion_pairs` and `combined` read
the pairs an export writes with `--criterion` and `--combine` (the batches `export_dataset` hands its writer),
as (prompt, chosen, rejected) texts, so two stores compare whatever their ids.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from hypothesis import strategies as st
from sqlalchemy import select

from preflab.db.export.combine import combined_pairs
from preflab.db.export.job import comparison_batches
from preflab.db.export.rules import parse_rule
from preflab.db.export.selection import held_criteria
from preflab.db.ingest.jsonl import import_file, import_rankings_batch
from preflab.db.models import Candidate, PairBuild, Prompt
from preflab.db.pairs.build import build_pairs
from tests.db.helpers import ranking_line, write_lines
from tests.db.ingest.law_store import emptied

CRITERIA = ("harmlessness", "helpfulness", "honesty")
PEOPLE = (("alice", "human"), ("bob", "human"), ("judge", "ai"))

Triple = tuple[str, str, str]  # (prompt, chosen, rejected) texts


@dataclass(frozen=True)
class Ranked:
    """One generated ranking: tiers of reply numbers of prompt `prompt`, best first."""

    prompt: int
    criterion: str
    annotator: int  # into PEOPLE
    tiers: tuple[tuple[int, ...], ...]
    number: int  # its id in the file, which shuffling keeps


def line(r: Ranked) -> str:
    replies = sorted(i for tier in r.tiers for i in tier)
    at = {reply: j for j, reply in enumerate(replies)}
    name, kind = PEOPLE[r.annotator]
    return ranking_line(
        f"prompt {r.prompt}",
        [f"reply {r.prompt}.{i}" for i in replies],
        [[at[i] for i in tier] for tier in r.tiers],
        name,
        kind,
        id=f"r{r.number}",
        criterion=r.criterion,
    )


@st.composite
def tiers_of(draw, replies: int) -> tuple[tuple[int, ...], ...]:
    """Two or more of `replies` replies in up to three tiers (a whole tie too)."""
    chosen = draw(st.lists(st.integers(0, replies - 1), min_size=2, max_size=replies, unique=True))
    tier = draw(st.lists(st.integers(0, 2), min_size=len(chosen), max_size=len(chosen)))
    return tuple(tuple(sorted(r for r, t in zip(chosen, tier) if t == n)) for n in sorted(set(tier)))


@st.composite
def stores(draw, criteria=CRITERIA[:2], one_each: tuple[str, ...] = (), people=(0, 1, 2)) -> list[Ranked]:
    """Rankings of 1 to 3 prompts of 2 to 4 replies: per prompt and criterion, 1 or 2 annotators (one for the
    criteria in `one_each`; none, now and then, for any criterion), each ranking any two or more of the replies."""
    out: list[Ranked] = []
    for prompt in range(draw(st.integers(1, 3))):
        replies = draw(st.integers(2, 4))
        for criterion in criteria:
            most = 1 if criterion in one_each else 2
            least = 0 if draw(st.integers(0, 4)) == 4 else 1
            who = draw(st.lists(st.sampled_from(people), min_size=least, max_size=most, unique=True))
            for annotator in who:
                out.append(Ranked(prompt, criterion, annotator, draw(tiers_of(replies)), len(out)))
    return out


def renamed(rankings: list[Ranked], names: dict[str, str]) -> list[Ranked]:
    return [replace(r, criterion=names[r.criterion]) for r in rankings]


def stored(sessions, folder: Path, rankings: list[Ranked], aggregate: str = "none", strategy: str = "all") -> None:
    """An emptied store holding `rankings` (imported as JSON Lines), and its pairs built."""
    emptied(sessions)
    if rankings:
        path = write_lines(folder / "rankings.jsonl", [line(r) for r in rankings])
        import_file(sessions, path, import_rankings_batch)
    with sessions.begin() as s:
        build_pairs(s, strategy, aggregate)


def _texts(session, batches) -> list[Triple]:
    prompts = dict(session.execute(select(Prompt.id, Prompt.text)).all())
    replies = dict(session.execute(select(Candidate.id, Candidate.text)).all())
    out = []
    for batch in batches:
        columns = batch.to_pydict()
        out += [
            (prompts[p], replies[c], replies[r])
            for p, c, r in zip(columns["prompt_id"], columns["chosen_id"], columns["rejected_id"])
        ]
    return out


def criterion_pairs(sessions, criterion: str, annotators: str = "human-first") -> list[Triple]:
    """The pairs `export --criterion` writes."""
    with sessions.begin() as s:
        return _texts(s, comparison_batches(s, annotators, criteria=(criterion,)))


def combined(sessions, rule: str, annotators: str = "human-first") -> tuple[list[Triple], Counter]:
    """The pairs `export --combine RULE` writes, and those it dropped by why."""
    with sessions.begin() as s:
        strategy = s.scalar(select(PairBuild.strategy).order_by(PairBuild.id.desc()).limit(1))
        result = combined_pairs(s, parse_rule(rule).over(held_criteria(s, annotators)), annotators, strategy)
        return _texts(s, result.batches), result.dropped
