"""Pairs never cross criteria: laws of `pairs build` over rankings by several criteria, on SQLite and Postgres.

- A pair carries the criterion of the ranking it came from; an aggregated pair, the criterion of every ranking
  it combined.
- Separation: the pairs of one criterion are the same whether or not the store holds rankings of another
  (the other's rankings deleted, the build gives criterion A's pairs exactly as before).
- Relabelling: renaming a criterion renames its pairs' criterion and changes nothing else.
"""

from __future__ import annotations

import random
from itertools import count

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select, update

from preflab.db.ingest.jsonl import import_file, import_rankings_batch
from preflab.db.models import Candidate, Comparison, Prompt, Ranking, RankingStatus
from preflab.db.pairs.build import build_pairs
from tests.db.helpers import ranking_line, write_lines
from tests.properties import examples

CRITERIA = ("helpfulness", "harmlessness", "overall")
SETTINGS = [("all", "none"), ("adjacent", "none"), ("all", "majority"), ("all", "borda"), ("all", "bradley-terry")]


def rankings(seed: int, n: int) -> list[str]:
    """n random rankings over six prompts by a few annotators, each by one of CRITERIA (ties, unranked replies)."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        p = rng.randrange(6)
        k = 3 + p % 3
        order = rng.sample(range(k), k)
        ranked, tiers = order[: rng.randint(2, k)], []
        while ranked:
            size = 2 if len(ranked) > 2 and rng.random() < 0.3 else 1
            tiers.append(ranked[:size])
            ranked = ranked[size:]
        lines.append(
            ranking_line(
                f"prompt {p}",
                [f"answer {p}.{j}" for j in range(k)],
                tiers,
                f"annotator-{rng.randrange(3)}",
                id=f"{seed}-{i}",
                criterion=rng.choice(CRITERIA),
            )
        )
    return lines


def pairs(session, criterion: str | None = None) -> list[tuple]:
    """The comparisons in build order, by text (prompt, chosen, rejected), with criterion, kind, margin, weight."""
    chosen, rejected = Candidate.__table__.alias(), Candidate.__table__.alias()
    query = (
        select(
            Prompt.text,
            chosen.c.text,
            rejected.c.text,
            Comparison.criterion,
            Comparison.annotator_kind,
            Comparison.margin,
            Comparison.weight,
        )
        .join(Prompt, Prompt.id == Comparison.prompt_id)
        .join(chosen, chosen.c.id == Comparison.chosen_id)
        .join(rejected, rejected.c.id == Comparison.rejected_id)
        .order_by(Comparison.id)
    )
    if criterion is not None:
        query = query.where(Comparison.criterion == criterion)
    return [tuple(row) for row in session.execute(query)]


@pytest.mark.parametrize("strategy,aggregate", SETTINGS)
def test_pairs_never_cross_criteria(sessions, tmp_path, strategy, aggregate):
    files = count()

    @settings(max_examples=examples(4))
    @given(seed=st.integers(0, 10**6), n=st.integers(4, 24), other=st.sampled_from(CRITERIA))
    def law(seed, n, other):
        path = write_lines(tmp_path / f"{next(files)}.jsonl", rankings(seed, n))
        import_file(sessions, path, import_rankings_batch)
        with sessions.begin() as s:
            build_pairs(s, strategy, aggregate, full=True)
            before = {c: pairs(s, c) for c in CRITERIA}
            if aggregate == "none":  # each pair's criterion is its ranking's
                for rid, criterion in s.execute(select(Comparison.ranking_id, Comparison.criterion)):
                    assert s.get(Ranking, rid).criterion == criterion
            else:  # a consensus pair only combines rankings of its criterion: one per prompt and criterion
                prompts = s.execute(select(Comparison.prompt_id, Comparison.criterion).distinct()).all()
                for prompt_id, criterion in prompts:
                    assert s.scalar(
                        select(Ranking.id).where(Ranking.prompt_id == prompt_id, Ranking.criterion == criterion)
                    )

        # Separation: without the other criterion's rankings, every other criterion's pairs are as they were.
        with sessions.begin() as s:
            gone = s.scalars(
                select(Ranking.id).where(Ranking.criterion == other, Ranking.status == RankingStatus.valid.value)
            ).all()
            s.execute(update(Ranking).where(Ranking.id.in_(gone)).values(status=RankingStatus.deleted.value))
            build_pairs(s, strategy, aggregate)
            assert pairs(s, other) == []
            for criterion in CRITERIA:
                if criterion != other:
                    assert pairs(s, criterion) == before[criterion]
            s.execute(update(Ranking).where(Ranking.id.in_(gone)).values(status=RankingStatus.valid.value))

        # Relabelling: the other criterion renamed, its pairs are the same pairs under the new name.
        with sessions.begin() as s:
            s.execute(update(Ranking).where(Ranking.criterion == other).values(criterion="renamed"))
            build_pairs(s, strategy, aggregate, full=True)
            assert pairs(s, "renamed") == [(*row[:3], "renamed", *row[4:]) for row in before[other]]
            for criterion in CRITERIA:
                if criterion != other:
                    assert pairs(s, criterion) == before[criterion]
            s.execute(update(Ranking).where(Ranking.criterion == "renamed").values(criterion=other))

    law()


def test_one_annotator_ranking_two_criteria_oppositely_gives_each_its_own_pairs(sessions, tmp_path):
    lines = [
        ranking_line("Pick a lock?", ["No.", "Use a pick."], [[1], [0]], "pku", criterion="helpfulness", id="h"),
        ranking_line("Pick a lock?", ["No.", "Use a pick."], [[0], [1]], "pku", criterion="harmlessness", id="h"),
    ]
    import_file(sessions, write_lines(tmp_path / "two.jsonl", lines), import_rankings_batch)
    for aggregate in ("none", "majority", "borda"):
        with sessions.begin() as s:
            build_pairs(s, "all", aggregate)
            assert sorted(row[:4] for row in pairs(s)) == [
                ("Pick a lock?", "No.", "Use a pick.", "harmlessness"),
                ("Pick a lock?", "Use a pick.", "No.", "helpfulness"),
            ]
