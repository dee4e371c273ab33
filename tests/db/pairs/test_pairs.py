"""Rankings → pairs: invariants (hypothesis), strategies, aggregation, determinism."""

import json
from itertools import combinations, pairwise

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import func, select

from preflab.db.models import Candidate, Comparison, Ranking
from preflab.db.pairs.build import (
    aggregate_prompt,
    borda,
    bradley_terry,
    expand_tiers,
    majority,
    tiers_from_scores,
)
from tests.db.helpers import ranking_line, write_lines


@st.composite
def tiered_rankings(draw):
    """A random ranking: n distinct items split into tiers, possibly with unranked items."""
    n = draw(st.integers(2, 9))
    items = draw(st.permutations(list(range(n))))
    ranked = draw(st.integers(1, n))
    cuts = sorted(draw(st.sets(st.integers(1, ranked - 1), max_size=ranked - 1))) if ranked > 1 else []
    bounds = [0, *cuts, ranked]
    return [list(items[a:b]) for a, b in pairwise(bounds)]


@given(tiered_rankings())
def test_all_strategy_invariants(tiers):
    pairs = [(a, b) for a, b, _ in expand_tiers(tiers, "all")]
    position = {item: t for t, tier in enumerate(tiers) for item in tier}
    sizes = [len(t) for t in tiers]
    n = sum(sizes)
    # count: nC2 minus the pairs inside tiers
    assert len(pairs) == n * (n - 1) // 2 - sum(s * (s - 1) // 2 for s in sizes)
    assert len(set(pairs)) == len(pairs)
    for a, b in pairs:
        assert position[a] < position[b]  # follows the source order, never inside a tier
        assert (b, a) not in pairs  # antisymmetric
    pair_set = set(pairs)
    for (a, b), (c, d) in combinations(pairs, 2):  # transitive
        if b == c:
            assert (a, d) in pair_set
        if d == a:
            assert (c, b) in pair_set


@given(tiered_rankings())
def test_strict_ranking_gives_n_choose_2(tiers):
    flat = [[item] for tier in tiers for item in tier]
    n = len(flat)
    assert len(list(expand_tiers(flat, "all"))) == n * (n - 1) // 2
    assert len(list(expand_tiers(flat, "adjacent"))) == n - 1
    assert len(list(expand_tiers(flat, "best-vs-rest"))) == n - 1
    assert len(list(expand_tiers(flat, "best-vs-worst"))) == (1 if n > 1 else 0)


@given(tiered_rankings(), st.sampled_from(["adjacent", "best-vs-rest", "best-vs-worst"]))
def test_other_strategies_are_subsets_of_all(tiers, strategy):
    every = {(a, b) for a, b, _ in expand_tiers(tiers, "all")}
    assert {(a, b) for a, b, _ in expand_tiers(tiers, strategy)} <= every


def test_margins_are_tier_gaps():
    assert list(expand_tiers([[1], [2, 3], [4]])) == [(1, 2, 1), (1, 3, 1), (1, 4, 2), (2, 4, 1), (3, 4, 1)]


def test_tiers_from_scores_ties_equal_scores():
    assert tiers_from_scores({10: 1.0, 11: 3.0, 12: 3.0, 13: 0.5}) == [[11, 12], [10], [13]]


def test_majority_borda_bradley_terry():
    rankings = [[[1], [2], [3]], [[1], [3], [2]], [[2], [1], [3]]]
    assert majority(rankings) == [(1, 2, 1, 2 / 3), (1, 3, 3, 1.0), (2, 3, 1, 2 / 3)]
    scores = borda(rankings)
    assert scores[1] > scores[2] > scores[3]
    strengths = bradley_terry(rankings)
    assert strengths[1] > strengths[2] > strengths[3]
    assert [(a, b) for a, b, *_ in aggregate_prompt(rankings, "all", "borda")] == [(1, 2), (1, 3), (2, 3)]
    assert [(a, b) for a, b, *_ in aggregate_prompt(rankings, "best-vs-worst", "bradley-terry")] == [(1, 3)]


def test_majority_drops_even_votes():
    assert majority([[[1], [2]], [[2], [1]]]) == []


LINES = [
    ranking_line("Q1", ["a", "b", "c", "d"], [[0], [1], [2], [3]], "alice", id="1"),
    ranking_line("Q1", ["a", "b", "c", "d"], [[1], [0, 2], [3]], "bob", id="1"),
    ranking_line("Q1", ["a", "b", "c", "d"], [[0], [2]], "judge", "ai", id="1", scores=[0.9, 0.1, 0.4, 0.2]),
    ranking_line("Q2", ["x", "y", "z"], [[2], [0], [1]], "alice", id="2"),
]


def built_pairs(session):
    texts = dict(session.execute(select(Candidate.id, Candidate.text)).all())
    return sorted(
        (texts[c.chosen_id], texts[c.rejected_id], c.margin, c.annotator_kind)
        for c in session.scalars(select(Comparison))
    )


def test_build_pairs_in_the_database(cli, sessions, tmp_path):
    cli("import", "rankings", write_lines(tmp_path / "r.jsonl", LINES))
    out = json.loads(cli("pairs", "build", "--json").stdout)
    assert out["rankings"] == 4 and out["pairs"] == 6 + 5 + 1 + 3
    with sessions.begin() as s:
        pairs = built_pairs(s)
    assert ("a", "c", 0.5, "ai") in pairs  # judge margin is the score gap
    assert ("b", "d", 2.0, "human") in pairs  # bob: b in tier 0, d in tier 2
    assert not any(p[:2] in {("a", "c"), ("c", "a")} and p[3] == "human" and p[2] == 0 for p in pairs)
    human = json.loads(cli("pairs", "build", "--annotator-kind", "human", "--json").stdout)
    assert human["pairs"] == 14 and human["rankings"] == 3
    adjacent = json.loads(cli("pairs", "build", "--strategy", "adjacent", "--json").stdout)
    assert adjacent["pairs"] == 3 + 4 + 1 + 2


def test_building_twice_gives_identical_rows(cli, sessions, tmp_path):
    cli("import", "rankings", write_lines(tmp_path / "r.jsonl", LINES))
    snapshots = []
    for _ in range(2):
        cli("pairs", "build", "--aggregate", "none")
        with sessions.begin() as s:
            snapshots.append(
                [
                    (c.prompt_id, c.chosen_id, c.rejected_id, c.ranking_id, c.margin, c.weight)
                    for c in s.scalars(select(Comparison).order_by(Comparison.id))
                ]
            )
    assert snapshots[0] == snapshots[1] and snapshots[0]


def test_aggregate_borda_gives_one_consensus_per_prompt(cli, sessions, tmp_path):
    cli("import", "rankings", write_lines(tmp_path / "r.jsonl", LINES))
    cli("pairs", "build", "--aggregate", "borda", "--annotator-kind", "human")
    with sessions.begin() as s:
        pairs = built_pairs(s)
        assert s.scalar(select(func.count()).where(Comparison.ranking_id.is_not(None))) == 0
    q1 = [(a, b) for a, b, _, _ in pairs if a in "abcd"]
    # mean normalised Borda: a (1 + 0.5)/2, b (2/3 + 1)/2, c (1/3 + 0.5)/2, d 0
    assert q1 == [("a", "c"), ("a", "d"), ("b", "a"), ("b", "c"), ("b", "d"), ("c", "d")]


def test_skipped_and_superseded_rankings_give_no_pairs(cli, sessions, tmp_path):
    cli("import", "rankings", write_lines(tmp_path / "r.jsonl", LINES))
    with sessions.begin() as s:
        for r in s.scalars(select(Ranking).where(Ranking.external_id == "2")):
            r.status = "skipped"
    out = json.loads(cli("pairs", "build", "--json").stdout)
    assert out["pairs"] == 12


def test_majority_needs_strategy_all(cli):
    result = cli("pairs", "build", "--aggregate", "majority", "--strategy", "adjacent", expect_ok=False)
    assert result.exit_code == 1 and "use it with --strategy all" in result.output
