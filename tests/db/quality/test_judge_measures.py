"""A pairwise judge's position measures (`judge report`, `stats --judges`, the report) against a direct count.

The store holds a judge's rankings with the verdicts of every pair in both orders,
as `judge pairwise` writes them into each candidate's details (the candidate's own
view: P(it wins | shown first), P(it wins | shown second), its outcome; an
abstention has no probabilities). Generated verdicts, on SQLite and on Postgres:
swap consistency, the first position's rate, position bias (the same place won in
both orders) and abstentions must equal the shares counted here one entry at a time.
"""

from __future__ import annotations

import json
import random
from itertools import combinations

import pytest
from sqlalchemy import select

from preflab.db.models import Annotator, Ranking, RankingItem
from tests.db.helpers import ranking_line, write_lines

FLIP = {"win": "loss", "loss": "win", "tie": "tie", "abstain": "abstain"}


def flip(p: float | None) -> float | None:
    """The other candidate's view of the same probability."""
    return None if p is None else 1 - p


def verdict(rng: random.Random) -> tuple[str, float | None, float | None]:
    """(x's outcome, P(x wins | x first), P(x wins | x second)), an abstention one time in eight."""
    if rng.random() < 0.125:
        return "abstain", None, None
    first, second = rng.choice((0.1, 0.4, 0.5, 0.6, 0.9)), rng.choice((0.1, 0.4, 0.5, 0.6, 0.9))
    outcome = "win" if first > 0.5 and second > 0.5 else "loss" if first < 0.5 and second < 0.5 else "tie"
    return outcome, first, second


def test_position_measures_are_direct_counts(cli, sessions, tmp_path):
    rng = random.Random(46)
    lines = []
    for p in range(12):
        replies = [f"reply {i} to {p}" for i in range(rng.randint(2, 4))]
        order = [[i] for i in rng.sample(range(len(replies)), len(replies))]
        lines.append(ranking_line(f"Prompt {p}?", replies, order, "pairwise-judge", "ai", id=f"j{p}"))
        lines.append(ranking_line(f"Prompt {p}?", replies, order[::-1], "someone", id=f"h{p}"))
    cli("import", "rankings", write_lines(tmp_path / "judged.jsonl", lines))

    entries = []  # every (outcome, p_as_a, p_as_b) written, one per candidate per pair
    with sessions.begin() as s:
        judge = s.scalar(select(Annotator.id).where(Annotator.name == "pairwise-judge"))
        s.execute(select(Annotator).where(Annotator.id == judge)).scalar_one().judge_kind = "pairwise"
        for ranking in s.scalars(select(Ranking).where(Ranking.annotator_id == judge)):
            items = {
                i.candidate_id: i for i in s.scalars(select(RankingItem).where(RankingItem.ranking_id == ranking.id))
            }
            pairs = {c: [] for c in items}
            for x, y in combinations(sorted(items), 2):
                outcome, first, second = verdict(rng)
                flip = lambda q: None if q is None else 1 - q  # noqa: E731 (y's view of the same verdicts)
                pairs[x].append({"vs": y, "p_as_a": first, "p_as_b": second, "outcome": outcome})
                pairs[y].append({"vs": x, "p_as_a": flip(second), "p_as_b": flip(first), "outcome": FLIP[outcome]})
            for c, item in items.items():
                item.details = {"pairs": pairs[c]}
                entries += [(e["outcome"], e["p_as_a"], e["p_as_b"]) for e in pairs[c]]

    read = [(a, b) for outcome, a, b in entries if outcome != "abstain"]
    consistent = sum(outcome not in ("tie", "abstain") for outcome, _, _ in entries)
    first_both = sum(a > 0.5 > b for a, b in read)
    second_both = sum(a < 0.5 < b for a, b in read)
    want = {
        "swap_consistency": consistent / len(read),
        "first_position_rate": sum(a > 0.5 for a, _ in read) / len(read),
        "position_bias": (first_both + second_both) / len(read),
        "position_first": first_both / len(read),
        "position_second": second_both / len(read),
    }
    assert len(read) > 50 and first_both and second_both

    from preflab.labelling.judges.report import judge_report
    from preflab.report.judges import judges_section

    with sessions() as s:
        [row] = judge_report(s, [judge])
        [page] = judges_section(s)
    assert row["pairs_judged"] == len(read) // 2
    assert row["abstentions"] == (len(entries) - len(read)) // 2
    for name, value in want.items():
        assert row[name] == pytest.approx(value), name
    [board] = json.loads(cli("stats", "--judges", "--json").stdout)["judges"]
    for name in ("position_bias", "position_first", "position_second"):
        assert board[name] == pytest.approx(want[name]) and page[name] == pytest.approx(want[name]), name
