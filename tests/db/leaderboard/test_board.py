"""The leaderboard's result on battles in memory: notes, anchors, seeds, the pairwise tables, refusals."""

import itertools

import numpy as np
import pytest

from preflab.db.leaderboard.battles import from_labels
from preflab.db.leaderboard.board import LeaderboardConfig, rate
from preflab.errors import ConfigError, InputError


def battles(*games):
    """(a, b, winner) triples, each its own ranking."""
    return from_labels(*zip(*games)) if games else from_labels([], [], [])


def test_models_that_never_met_and_a_model_that_never_lost_are_said():
    games = [
        ("x", "y", "model_a"),
        ("x", "y", "model_b"),
        ("z", "w", "tie"),
        ("z", "w", "model_a"),
        ("z", "w", "model_b"),
        ("v", "z", "model_a"),
        ("v", "w", "model_a"),
    ]
    board = rate(battles(*games), LeaderboardConfig(bootstrap=50))
    assert any(
        note.startswith("these groups of models never met") and "group 1: v, z, w | group 2: x, y" in note
        for note in board.notes
    ), board.notes
    assert any(note.startswith("v won every battle") for note in board.notes)
    # every model has under 10 battles: each gets the exact test's interval and no rank, v no upper end
    assert all(r.interval == "exact" and r.rank is None and r.few_battles for r in board.ratings)
    v = board.ratings[0]
    assert (v.model, v.few_battles, v.upper) == ("v", "only 2 battles, all won", None) and v.lower < v.rating
    assert all(np.isfinite([r.rating, r.lower, r.upper]).all() for r in board.ratings[1:])


def test_disconnected_groups_are_listed_group_by_group_each_ranked_within_itself():
    """Eight models in a chain (30 wins to 10 between neighbours) and two that only met each other.

    Ordered by median alone, b1 (about 1100) sat between a3 and a4 with a rank counted against
    models it never met; now each group is listed whole, by rank, and ranked within itself.
    """
    chain = [f"a{k}" for k in range(1, 9)]
    games = [game for x, y in itertools.pairwise(chain) for game in [(x, y, "model_a")] * 30 + [(y, x, "model_a")] * 10]
    games += [("b1", "b2", "model_a")] * 9 + [("b2", "b1", "model_a")] * 3
    board = rate(battles(*games), LeaderboardConfig(bootstrap=100))
    rows = [(r.model, r.group, r.rank) for r in board.ratings]
    assert [m for m, _, _ in rows] == [*chain, "b1", "b2"]
    assert [(g, rank) for _, g, rank in rows] == sorted((g, rank) for _, g, rank in rows)
    assert [rank for m, _, rank in rows if m.startswith("b")] == [1, 1]
    assert board.method["centre_cap"] == [50, 50]  # each group centred on its own mean
    median = {r.model: r.median for r in board.ratings}
    assert median["a4"] < median["b1"] < median["a3"]  # where a sort by median alone put it
    assert board.method["order"].startswith("group, then rank, then bootstrap median; models of few battles last")

    from preflab.commands.leaderboard import leaderboard_text

    lines = leaderboard_text(board).splitlines()
    first, second = (
        lines.index(f"group {k} of 2 ({n} models; ratings and ranks compare only within a group)")
        for k, n in ((1, 8), (2, 2))
    )
    assert [line.split()[1] for line in lines[first + 1 : second]] == chain
    assert [line.split()[:2] for line in lines[second + 1 : second + 3]] == [["1", "b1"], ["1", "b2"]]
    unbooted = rate(battles(*games), LeaderboardConfig(bootstrap=0))
    assert [(r.model, r.group, r.rank) for r in unbooted.ratings] == [
        *((m, 1, k) for k, m in enumerate(chain, 1)),
        ("b1", 2, 1),
        ("b2", 2, 2),
    ]


def test_the_anchor_is_1000_in_every_bootstrap_round_and_the_seed_fixes_the_intervals():
    rng = np.random.default_rng(3)
    games = [
        (a, b, rng.choice(["model_a", "model_b", "tie"], p=[0.5, 0.4, 0.1]))
        for a, b in rng.choice(["p", "q", "r"], size=(300, 2))
        if a != b
    ]
    data = battles(*games)
    anchored = {r.model: r for r in rate(data, LeaderboardConfig(bootstrap=100, anchor="q")).ratings}
    assert (anchored["q"].rating, anchored["q"].lower, anchored["q"].upper) == pytest.approx((1000, 1000, 1000))
    first = rate(data, LeaderboardConfig(bootstrap=100, seed=1)).ratings
    assert rate(data, LeaderboardConfig(bootstrap=100, seed=1)).ratings == first
    assert rate(data, LeaderboardConfig(bootstrap=100, seed=2)).ratings != first
    plain = rate(data, LeaderboardConfig(bootstrap=0))
    assert all(r.lower is None and r.median is None for r in plain.ratings)
    assert [r.rating for r in plain.ratings] == sorted((r.rating for r in plain.ratings), reverse=True)


def test_the_pairwise_tables_count_ties_as_half_and_predict_from_the_ratings():
    games = (
        [("x", "y", "model_a")] * 6
        + [("y", "x", "model_a")] * 2
        + [("x", "y", "tie")] * 2
        + [("y", "z", "model_a")] * 5
        + [("z", "y", "model_a")] * 3
    )
    board = rate(battles(*games), LeaderboardConfig(bootstrap=100, pairwise=True))
    table = board.pairwise
    assert table["models"] == ["x", "y", "z"]
    assert table["battles"] == [[0, 10, 0], [10, 0, 8], [0, 8, 0]]
    assert table["win_rate"][0][1] == pytest.approx(7 / 10) and table["win_rate"][0][2] is None
    rating = {r.model: r.rating for r in board.ratings}
    assert table["predicted"][0][1] == pytest.approx(1 / (1 + 10 ** ((rating["y"] - rating["x"]) / 400)), abs=1e-4)
    assert table["share_better"][0][2] > 0.5


def test_refusals_are_one_sentence():
    with pytest.raises(InputError, match="no ranking compares candidates of two different models"):
        rate(battles(), LeaderboardConfig())
    with pytest.raises(InputError, match="'nope' is not on the board"):
        rate(battles(("x", "y", "tie")), LeaderboardConfig(anchor="nope"))
    with pytest.raises(ConfigError, match="--bootstrap"):
        LeaderboardConfig(bootstrap=-1)
    with pytest.raises(ConfigError, match="--since"):
        LeaderboardConfig(since="last week")
    assert LeaderboardConfig(since="2025-01-31T10:00+02:00").since_at.isoformat() == "2025-01-31T08:00:00+00:00"
