"""The leaderboard recovers known strengths: order, value and honest intervals.

8 models with known strengths, 4,000 battles with ties from three annotators who tie
at different rates (`simulate.py`). The strengths are Elo-scale and the ratings' mean
is 1000, so the truth a rating estimates is 1000 + s − mean(s).
"""

import numpy as np
import pytest
from scipy.optimize import minimize

from preflab.db.leaderboard.battles import Battles
from preflab.db.leaderboard.board import LeaderboardConfig, rate
from tests.db.leaderboard.simulate import simulate

STRENGTHS = np.array([0.0, 55.0, 110.0, 165.0, 220.0, 275.0, 330.0, 385.0])  # ≥ 50 Elo apart
TRUTH = 1000.0 + STRENGTHS - STRENGTHS.mean()
NAMES = [f"m{k}" for k in range(8)]


def battles(seed: int, n: int = 4000) -> Battles:
    rng = np.random.default_rng(seed)
    permuted = rng.permutation(8)  # the models meet in no telling order
    a, b, outcome, _ = simulate(STRENGTHS[permuted], n, rng)
    return Battles([NAMES[k] for k in permuted], a, b, outcome, np.arange(n))


def independent_fit(data: Battles) -> np.ndarray:
    """Elo ratings by plain maximum likelihood, written here: scipy's BFGS on the BT log-likelihood, ties half."""
    a, b, y = data.a, data.b, data.outcome
    x = np.log(10) / 400

    def nll(r):
        d = x * (r[a] - r[b])
        return (y * np.logaddexp(0, -d) + (1 - y) * np.logaddexp(0, d)).sum()

    r = minimize(nll, np.zeros(len(data.models)), method="BFGS", options={"gtol": 1e-9}).x
    return r - r.mean() + 1000.0


def test_the_order_is_exact_and_the_ratings_match_an_independent_fit():
    data = battles(seed=1)
    board = rate(data, LeaderboardConfig(bootstrap=1000))
    assert [r.model for r in board.ratings] == NAMES[::-1]
    reference = dict(zip(data.models, independent_fit(data)))
    for r in board.ratings:
        assert r.rating == pytest.approx(reference[r.model], abs=1.0)
        assert r.rating == pytest.approx(TRUTH[NAMES.index(r.model)], abs=60.0)  # and near the truth itself
    assert sum(r.battles for r in board.ratings) == 2 * 4000
    assert sum(r.ties for r in board.ratings) > 2 * 200  # ties were there, and counted as ties


def test_each_true_strength_is_inside_its_95_percent_interval_90_to_98_percent_of_the_time():
    covered = np.zeros(8)
    datasets = 200
    for seed in range(datasets):
        board = rate(battles(seed=1000 + seed), LeaderboardConfig(bootstrap=200, seed=seed))
        for r in board.ratings:
            k = NAMES.index(r.model)
            covered[k] += r.lower <= TRUTH[k] <= r.upper
    coverage = covered / datasets
    assert ((coverage >= 0.90) & (coverage <= 0.98)).all(), coverage
