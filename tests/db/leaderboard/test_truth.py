"""The leaderboard recovers known strengths: order, value and honest intervals.

8 models with known strengths, 4,000 battles with ties from three annotators who tie
at different rates (`simulate.py`). The strengths are Elo-scale and the ratings' mean
is 1000, so the truth a rating estimates is 1000 + s − mean(s). The calibration test adds
two newcomers of 3 to 5 battles each, whose truth is centred the board's way (`true_ratings`).
"""

import numpy as np
import pytest
from scipy.optimize import minimize

from preflab.db.leaderboard.battles import Battles
from preflab.db.leaderboard.board import LeaderboardConfig, rate
from tests.db.leaderboard.simulate import newcomer, simulate, true_ratings

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

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


NEWCOMERS = 2  # models of 3 to 5 battles beside the 8
ROUNDS = 100  # bootstrap rounds per world: quantiles at 2.5% from 100 draws move coverage by about a point


def calibration_world(seed: int) -> tuple[Battles, np.ndarray]:
    """The 8 models' 4,000 battles and two newcomers' 3 to 5 each against them; (battles, truth per model)."""
    rng = np.random.default_rng(seed)
    permuted = rng.permutation(8)
    a, b, outcome, _ = simulate(STRENGTHS[permuted], 4000, rng)
    strengths = np.concatenate([STRENGTHS[permuted], rng.uniform(-50.0, 435.0, NEWCOMERS)])
    for k in range(8, 8 + NEWCOMERS):
        opponents = rng.integers(0, 8, rng.integers(3, 6))
        a = np.concatenate([a, np.full(len(opponents), k)])
        b = np.concatenate([b, opponents])
        outcome = np.concatenate([outcome, newcomer(strengths[k], strengths[opponents], rng)])
    names = [NAMES[k] for k in permuted] + [f"new{k}" for k in range(NEWCOMERS)]
    data = Battles(names, a, b, outcome, np.arange(len(a)))
    played = np.bincount(a, minlength=len(names)) + np.bincount(b, minlength=len(names))
    return data, true_ratings(strengths, played)


def test_95_percent_intervals_cover_the_truth_for_dense_models_and_newcomers_of_3_to_5_battles():
    """Over 200 worlds: each dense model's coverage is 90–98%, the newcomers' at least 90%, all models' at least 90%.

    The newcomers' intervals are the exact test's (the bootstrap's covered about 70% at 3
    battles, 85% at 5: docs/guides/leaderboard.md). No end sits at 1000, where the old
    bootstrap pinned every model missing from a sample, unless the truth is there.
    """
    datasets = 200
    dense, fresh = np.zeros(8), []
    ends = []
    for seed in range(datasets):
        data, truth = calibration_world(1000 + seed)
        board = rate(data, LeaderboardConfig(bootstrap=ROUNDS, seed=seed))
        for r in board.ratings:
            k = data.models.index(r.model)
            lower = -np.inf if r.lower is None else r.lower
            upper = np.inf if r.upper is None else r.upper
            inside = bool(lower <= truth[k] <= upper)
            if k < 8:
                assert r.interval == "bootstrap" and r.rank is not None
                dense[NAMES.index(r.model)] += inside
            else:
                assert (
                    r.interval == "exact" and r.rank is None and r.few_battles.startswith(f"only {r.battles} battles")
                )
                fresh.append(inside)
            ends += [e for e in (r.lower, r.upper) if e is not None and abs(truth[k] - 1000.0) > 1e-6]
    coverage, sparse = dense / datasets, float(np.mean(fresh))
    overall = (dense.sum() + sum(fresh)) / (8 * datasets + len(fresh))
    said = f"dense models {np.round(coverage, 3).tolist()}, newcomers {sparse:.3f}, all {overall:.3f}"
    assert ((coverage >= 0.90) & (coverage <= 0.98)).all(), said
    assert sparse >= 0.90 and overall >= 0.90, said
    assert not any(abs(e - 1000.0) < 1e-6 for e in ends), "an interval ends at the offset: " + said
