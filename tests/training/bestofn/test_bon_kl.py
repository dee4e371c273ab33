"""Exact KL and win rate of best-of-n against enumeration, Monte Carlo and the continuous limit."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preflab.errors import InputError
from preflab.training.bestofn.kl import (
    beirami_expected,
    beirami_kl,
    beirami_kl_log,
    bon_distribution,
    kl_bound,
    kl_exact,
    theory,
    win_rate_bound,
    win_rate_exact,
)
from tests.properties import examples


def enumerate_bon(probs, rewards, n):
    """P_bon, KL and win rate by enumerating every n-tuple of outcomes (ties split evenly)."""
    k = len(probs)
    pick = np.zeros(k)
    for draw in itertools.product(range(k), repeat=n):
        chance = math.prod(probs[i] for i in draw)
        best = max(rewards[i] for i in draw)
        tied = [i for i in draw if rewards[i] == best]
        for i in tied:
            pick[i] += chance / len(tied)
    kl = sum(pick[i] * math.log(pick[i] / probs[i]) for i in range(k) if pick[i] > 0)
    win = sum(
        pick[i] * probs[j] * (1.0 if rewards[i] > rewards[j] else 0.5 if rewards[i] == rewards[j] else 0.0)
        for i in range(k)
        for j in range(k)
    )
    return pick, kl, win


distributions = st.integers(1, 4).flatmap(
    lambda k: st.tuples(
        st.lists(st.floats(0.0, 1.0), min_size=k, max_size=k).filter(lambda w: sum(w) > 0.05),
        st.lists(st.integers(0, 2).map(float), min_size=k, max_size=k),  # few levels: ties
        st.integers(1, 4),
    )
)


@settings(max_examples=examples(120), deadline=None)
@given(distributions)
def test_matches_enumeration(case):
    weights, rewards, n = case
    probs = [w / sum(weights) for w in weights]
    pick, kl, win = enumerate_bon(probs, rewards, n)
    assert bon_distribution(probs, rewards, n) == pytest.approx(pick, abs=1e-12)
    assert kl_exact(probs, rewards, [n])[0] == pytest.approx(kl, abs=1e-10)
    assert win_rate_exact(probs, rewards, [n])[0] == pytest.approx(win, abs=1e-12)


@settings(max_examples=examples(120), deadline=None)
@given(st.lists(st.floats(0.001, 1.0), min_size=1, max_size=30), st.integers(1, 5000), st.randoms())
def test_bounds_hold_for_any_reference(weights, n, rnd):
    probs = np.array(weights) / sum(weights)
    rewards = [rnd.choice([0.0, 1.0, 2.0, rnd.random()]) for _ in weights]
    assert 0.0 <= kl_exact(probs, rewards, [n])[0] <= kl_bound(n) + 1e-9
    assert 0.5 - 1e-12 <= win_rate_exact(probs, rewards, [n])[0] <= win_rate_bound(n) + 1e-12


@pytest.mark.parametrize("n", [1, 2, 8, 64, 1024])
def test_without_point_masses_the_bounds_are_exact(n):
    """A fine uniform grid of distinct rewards is as good as continuous."""
    k = 200_000
    probs, rewards = np.full(k, 1 / k), np.arange(k, dtype=float)
    assert kl_exact(probs, rewards, [n])[0] == pytest.approx(kl_bound(n), abs=2e-3)
    assert win_rate_exact(probs, rewards, [n])[0] == pytest.approx(n / (n + 1), abs=1e-4)
    # Beirami's estimate is tight here too: every ε is tiny.
    assert beirami_expected(probs, rewards, [n])[0] == pytest.approx(kl_bound(n), abs=2e-3)


def test_point_masses_make_the_bound_loose():
    # The example: three outcomes, no ties.
    result = theory([0.5, 0.3, 0.2], [3, 2, 1], [1, 2, 4])
    assert result.kl_exact[0] == pytest.approx(0.0, abs=1e-12)
    for exact, bound in zip(result.kl_exact[1:], result.kl_bound[1:]):
        assert exact < bound
    assert result.win_rate == pytest.approx([0.5, 0.64, 0.7246])  # ½ Σ (Fⁿ − Gⁿ)(F + G) by hand
    assert result.win_rate_bound == pytest.approx([0.5, 2 / 3, 0.8])


def test_kl_saturates_at_minus_log_p_of_the_best():
    """As n grows best-of-n always picks the top outcome: KL → −log P(top)."""
    probs, rewards = [0.7, 0.2, 0.1], [0.0, 1.0, 2.0]
    assert kl_exact(probs, rewards, [10_000])[0] == pytest.approx(-math.log(0.1), rel=1e-9)
    assert win_rate_exact(probs, rewards, [10_000])[0] == pytest.approx(0.9 + 0.05)


def test_all_outcomes_tied_means_no_optimisation():
    assert kl_exact([0.2, 0.3, 0.5], [1.0, 1.0, 1.0], [1, 5, 50]) == pytest.approx([0, 0, 0], abs=1e-12)
    assert win_rate_exact([0.2, 0.3, 0.5], [1.0, 1.0, 1.0], [5])[0] == pytest.approx(0.5)


def test_tiny_level_masses_keep_their_digits():
    probs = np.array([1 - 2e-12, 1e-12, 1e-12])
    kl = kl_exact(probs, [0.0, 1.0, 2.0], [2, 1000])
    # The top outcome's chance 1 − (1 − 1e-12)ⁿ ≈ n·1e-12; everything finite and ≥ 0.
    assert np.all(np.isfinite(kl)) and np.all(kl >= 0)
    assert bon_distribution(probs, [0.0, 1.0, 2.0], 1000)[2] == pytest.approx(1000e-12, rel=1e-6)


def test_beirami_closed_form_limits():
    n = np.array([1, 2, 16, 1000])
    assert beirami_kl(np.full(4, 1.0), n) == pytest.approx([0, 0, 0, 0], abs=1e-12)  # the only output
    assert beirami_kl(np.full(4, 1e-12), n) == pytest.approx(kl_bound(n), abs=1e-6)  # ε → 0: the bound
    assert beirami_kl_log(np.full(4, -2000.0), n) == pytest.approx(kl_bound(n))  # e^−2000 underflows
    assert beirami_kl([0.3], [1])[0] == pytest.approx(0.0, abs=1e-12)
    eps, m = 0.25, 3
    keep = (1 - eps) ** m
    want = keep * (math.log(m) + (m - 1) * math.log(1 - eps) - (m - 1) / m) + (1 - keep) * math.log((1 - keep) / eps)
    assert beirami_kl([eps], [m])[0] == pytest.approx(want)


def test_beirami_expectation_matches_sampled_selections():
    rng = np.random.default_rng(0)
    probs, rewards, n = np.array([0.4, 0.3, 0.2, 0.1]), np.array([0.0, 2.0, 1.0, 3.0]), 3
    draws = rng.choice(4, size=(50_000, n), p=probs)
    picked = draws[np.arange(len(draws)), rewards[draws].argmax(axis=1)]
    sampled = beirami_kl(probs[picked], n).mean()
    assert beirami_expected(probs, rewards, [n])[0] == pytest.approx(sampled, abs=0.01)


def test_zero_probability_outcomes_play_no_part():
    with_zero = theory([0.5, 0.0, 0.5], [1.0, 5.0, 2.0], [3]).as_json()
    without = theory([0.5, 0.5], [1.0, 2.0], [3]).as_json()
    for key, values in without.items():
        assert with_zero[key] == pytest.approx(values)


@pytest.mark.parametrize(
    "probs,rewards,match",
    [
        ([0.5, 0.3], [1.0, 2.0], "sum to 0.8, not 1"),
        ([0.5, 0.5], [1.0], "2 probabilities but 1 rewards"),
        ([1.5, -0.5], [1.0, 2.0], "non-negative"),
        ([1.0], [float("inf")], "finite"),
    ],
)
def test_bad_distributions_are_refused(probs, rewards, match):
    with pytest.raises(InputError, match=match):
        theory(probs, rewards, [2])
