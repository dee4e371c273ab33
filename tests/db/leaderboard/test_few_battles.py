"""Models of few battles: the exact test's interval, no rank, and no say in the others' (issue 46 §1b).

The exact interval is checked against an independent construction: against opponents of
one rating, the score is binomial, and the interval is Clopper–Pearson's, which scipy's
beta quantiles give in closed form.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import beta

from preflab.db.leaderboard.battles import Battles, from_labels
from preflab.db.leaderboard.board import LeaderboardConfig, rate
from preflab.db.leaderboard.exact import score_interval
from preflab.db.leaderboard.fit import ALPHA, SCALE
from tests.db.leaderboard.simulate import simulate

FIVE = ["ultra", "large", "mid", "small", "tiny"]


@pytest.mark.parametrize(("wins", "n"), [(0, 3), (1, 3), (2, 5), (5, 5), (7, 9), (4, 20)])
def test_the_exact_interval_is_clopper_pearsons_against_opponents_of_one_rating(wins, n):
    opponent = 0.3  # natural units
    lower, upper = score_interval(np.full(n, -ALPHA * opponent), wins)
    p_low = beta.ppf(0.025, wins, n - wins + 1) if wins > 0 else 0.0
    p_high = beta.ppf(0.975, wins + 1, n - wins) if wins < n else 1.0

    def rating(p):  # the θ at which a battle is won with probability p
        return opponent + np.log(p / (1 - p)) / ALPHA if 0 < p < 1 else np.inf * (1 if p else -1)

    assert lower == pytest.approx(rating(p_low), abs=1e-5)
    assert upper == pytest.approx(rating(p_high), abs=1e-5)


def five_models(seed: int = 0, n: int = 290) -> list[tuple[str, str, str]]:
    """The issue's board: 290 battles among five models 80 Elo apart."""
    rng = np.random.default_rng(seed)
    a, b, outcome, _ = simulate([320.0, 240.0, 160.0, 80.0, 0.0], n, rng)
    names = np.array(FIVE)
    return [
        (x, y, "model_a" if o == 1 else "model_b" if o == 0 else "tie") for x, y, o in zip(names[a], names[b], outcome)
    ]


def board_of(games, **config):
    return {r.model: r for r in rate(from_labels(*zip(*games)), LeaderboardConfig(**config)).ratings}


def test_one_battle_of_a_new_model_moves_no_rank_and_no_interval_far():
    """Before: one loss of a newcomer widened every interval about 4× and collapsed the ranks to 1, 1, 1, 1, 2."""
    games = five_models()
    before = board_of(games)
    after = board_of([*games, ("newbie", "tiny", "model_b")])
    # a new pattern redraws the bootstrap, so a rank on the edge may move by one, never collapse
    assert all(abs(after[m].rank - before[m].rank) <= 1 for m in FIVE)
    assert len({after[m].rank for m in FIVE}) >= len({before[m].rank for m in FIVE}) - 1
    for m in FIVE:
        width = before[m].upper - before[m].lower
        assert after[m].upper - after[m].lower == pytest.approx(width, rel=0.25)
        assert abs(after[m].rating - before[m].rating) < 0.1 * width
    newbie = after["newbie"]
    assert (newbie.rank, newbie.few_battles, newbie.interval, newbie.lower) == (
        None,
        "only 1 battle, all lost",
        "exact",
        None,
    )
    # the upper end: where a win over tiny would be 97.5% likely, tiny held at its rating
    assert newbie.upper == pytest.approx(after["tiny"].rating + SCALE * np.log10(39), abs=0.01)


def test_records_of_all_losses_or_all_wins_have_an_open_end_never_1000():
    """wizardlm-13b lost 18 of 18 and showed −1434 [−1913, 1000]; claude-1 won its 3 and showed 2216 [1000, 2357]."""
    games = five_models()
    games += [("wizardlm-13b", FIVE[k % 5], "model_b") for k in range(18)]
    games += [("claude-1", FIVE[k], "model_a") for k in (1, 2, 3)]
    games += [("falcon-40b", FIVE[k % 5], "model_b") for k in range(16)] + [("falcon-40b", "tiny", "tie")]
    board = board_of(games)
    wizard, claude, falcon = board["wizardlm-13b"], board["claude-1"], board["falcon-40b"]
    assert (wizard.few_battles, wizard.lower, wizard.rank) == ("lost every battle", None, None)
    assert wizard.upper < board["tiny"].rating  # 0 of 18: surely below the weakest it met
    assert (claude.few_battles, claude.upper, claude.rank) == ("only 3 battles, all won", None, None)
    assert claude.lower < board["large"].rating  # 3 of 3 proves little
    assert falcon.interval == "bootstrap" and falcon.rank == 6  # 17 battles with a tie: ranked, below the five
    assert all(end is None or abs(end - 1000) > 1 for r in board.values() for end in (r.lower, r.upper))
    alone = board_of(five_models())
    assert all(abs(board[m].rank - alone[m].rank) <= 1 for m in FIVE)  # the unranked count for no one's rank


def test_a_model_of_many_battles_from_few_rankings_is_not_ranked():
    """10 battles, from two rankings of six replies: a bootstrap draws rankings, and a round misses both one time
    in seven. A model is as sparse as its rankings, however many battles they make."""
    games = five_models()
    data = from_labels(*zip(*games))
    a, b, outcome, group = [data.a], [data.b], [data.outcome], [data.group]
    models = [*data.models, "shy"]
    shy = len(data.models)
    for ranking, place in ((data.rankings, 2), (data.rankings + 1, 3)):
        order = [0, 1, 2, 3, 4]
        order.insert(place, shy)  # the ranking's tiers, best first: shy among the five
        pairs = [(order[i], order[j]) for i in range(6) for j in range(i + 1, 6)]
        a.append(np.array([p[0] for p in pairs]))
        b.append(np.array([p[1] for p in pairs]))
        outcome.append(np.ones(len(pairs)))
        group.append(np.full(len(pairs), ranking))
    merged = Battles(models, *(np.concatenate(x) for x in (a, b, outcome, group)))
    board = {r.model: r for r in rate(merged, LeaderboardConfig(bootstrap=200)).ratings}
    assert (board["shy"].battles, board["shy"].wins) == (5 + 5, 3 + 2)
    assert board["shy"].few_battles == "10 battles from only 2 rankings" and board["shy"].rank is None
    assert board["shy"].held < 0.99 * 200 and board["shy"].interval == "exact"


def test_a_few_long_rankings_of_other_models_leave_the_board_where_it_was():
    """A new user's case: 290 Arena battles, then 4 rankings of seven replies (Nectar's shape), each ranking two of the
    five with five models seen nowhere else. Before: 21 battles a ranking made those five look dense, their ratings
    swung by ~1,000 points from round to round and dragged the centre, and the ranks collapsed to 1, 1, 1, 1, 1. A
    model is as sparse as its rankings: those five are not ranked, and the five keep their ranks and intervals."""
    games = five_models()
    before = board_of(games, bootstrap=200)
    data = from_labels(*zip(*games))
    models = [*data.models, *(f"other-{k}" for k in range(5))]
    index = {m: k for k, m in enumerate(models)}
    rng = np.random.default_rng(5)
    a, b, outcome, group = [data.a], [data.b], [data.outcome], [data.group]
    for ranking in range(4):
        shown = [FIVE[ranking % 5], FIVE[(ranking + 2) % 5], *(f"other-{k}" for k in rng.permutation(5))]
        order = [index[m] for m in shown]  # best first: the two of the five, then the others in a random order
        pairs = [(order[i], order[j]) for i in range(7) for j in range(i + 1, 7)]
        a.append(np.array([x for x, _ in pairs]))
        b.append(np.array([y for _, y in pairs]))
        outcome.append(np.ones(len(pairs)))
        group.append(np.full(len(pairs), data.rankings + ranking))
    merged = Battles(models, *(np.concatenate(x) for x in (a, b, outcome, group)))
    after = {r.model: r for r in rate(merged, LeaderboardConfig(bootstrap=200)).ratings}
    for k in range(5):
        other = after[f"other-{k}"]
        assert other.rank is None and other.few_battles.endswith("from only 4 rankings"), other
    assert [after[m].rank for m in FIVE] == [before[m].rank for m in FIVE] and before["ultra"].rank == 1
    for m in FIVE:
        width = before[m].upper - before[m].lower
        assert after[m].upper - after[m].lower < 1.5 * width, (m, before[m], after[m])
        # The centre weighs the five newcomers by their 4 rankings each, against 50 for each of the five: it moves by
        # under a width (the locality asks 1.5 widths), and no difference between the five moves at all.
        assert abs(after[m].median - before[m].median) < width, (m, before[m], after[m])
