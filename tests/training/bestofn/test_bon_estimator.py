"""The unbiased best-of-n estimator against brute force, Monte Carlo and its special cases."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preflab.errors import InputError
from preflab.training.bestofn.estimator import (
    bon_expectations,
    estimate,
    geometric_ns,
    midranks,
    selection_probs,
)
from tests.properties import examples


def brute_force(proxy, true, n):
    """Mean over every n-subset of the true reward of its proxy maximum, ties split evenly."""
    total, count = 0.0, 0
    for subset in itertools.combinations(range(len(proxy)), n):
        best = max(proxy[i] for i in subset)
        tied = [true[i] for i in subset if proxy[i] == best]
        total += sum(tied) / len(tied)
        count += 1
    return total / count


samples = st.integers(1, 8).flatmap(
    lambda size: st.tuples(
        st.lists(st.integers(0, 3).map(float), min_size=size, max_size=size),  # few levels: many ties
        st.lists(st.floats(-10, 10, allow_nan=False), min_size=size, max_size=size),
    )
)


@settings(max_examples=examples(150), deadline=None)
@given(samples)
def test_matches_every_subset(data):
    proxy, true = data
    ns = list(range(1, len(proxy) + 1))
    got = bon_expectations(proxy, true, ns)
    want = [brute_force(proxy, true, n) for n in ns]
    assert got == pytest.approx(want, abs=1e-9)


def test_without_ties_the_weights_are_binomials():
    rng = np.random.default_rng(3)
    size = 40
    proxy = rng.permutation(size).astype(float)  # rank k = proxy + 1
    for n in (1, 2, 7, 40):
        probs = selection_probs(proxy, [n])[0]
        for i in range(size):
            k = int(proxy[i]) + 1
            want = Fraction(math.comb(k - 1, n - 1), math.comb(size, n))
            assert probs[i] == pytest.approx(float(want), rel=1e-10, abs=1e-300)


def test_large_n_is_stable_and_exact():
    """N = 3,000: binomials overflow floats; the weights still sum to 1 and match exact fractions."""
    size = 3000
    proxy = np.arange(size, dtype=float)
    ns = [1, 2, 500, 1500, 2999, 3000]
    assert bon_expectations(proxy, np.ones(size), ns) == pytest.approx(np.ones(len(ns)), abs=1e-9)
    for n in ns:
        ks = [n, (n + size) // 2, size]
        probs = bon_expectations(proxy, np.eye(size)[:, [k - 1 for k in ks]], [n])[0]
        for k, got in zip(ks, probs):
            want = Fraction(math.comb(k - 1, n - 1), math.comb(size, n))
            assert got == pytest.approx(float(want), rel=1e-9, abs=1e-300)


def test_n_1_is_the_mean_and_n_N_is_the_proxy_argmax():
    rng = np.random.default_rng(0)
    proxy, true = rng.normal(size=500), rng.normal(size=500)
    one, last = bon_expectations(proxy, true, [1, 500])
    assert one == pytest.approx(true.mean())
    assert last == pytest.approx(true[np.argmax(proxy)])


def test_n_N_with_tied_maxima_averages_them():
    proxy = [1.0, 3.0, 2.0, 3.0]
    true = [10.0, 1.0, 20.0, 5.0]
    assert bon_expectations(proxy, true, [4])[0] == pytest.approx(3.0)


def test_ties_split_the_level_mass_evenly():
    # Levels: {0}, {1, 1, 1}, {2}. For n = 2: P(max = 2) = 3/6 and each tied 1 gets (C(4,2) − C(1,2))/(3·C(5,2)).
    probs = selection_probs([0.0, 1.0, 1.0, 1.0, 2.0], [2])[0]
    assert probs == pytest.approx([0.0, 0.2, 0.2, 0.2, 0.4])


@pytest.mark.parametrize("size,correct", [(10, 3), (20, 1), (50, 17), (200, 120)])
def test_binary_true_reward_with_proxy_equal_to_it_is_pass_at_k(size, correct):
    """Best-of-n on a pass/fail score picks a pass whenever one is drawn: pass@k."""
    scores = np.array([1.0] * correct + [0.0] * (size - correct))
    ks = np.arange(1, size + 1)
    got = bon_expectations(scores, scores, ks)
    want = [1 - math.comb(size - correct, k) / math.comb(size, k) for k in ks]
    assert got == pytest.approx(want, abs=1e-12)


def test_agrees_with_monte_carlo_subsets():
    rng = np.random.default_rng(7)
    size = 60
    proxy = rng.integers(0, 10, size).astype(float)
    true = proxy + rng.normal(size=size)
    n, draws = 5, 20_000
    picks = np.empty(draws)
    for i in range(draws):
        subset = rng.choice(size, n, replace=False)
        best = subset[proxy[subset] == proxy[subset].max()]
        picks[i] = true[rng.choice(best)]
    got = bon_expectations(proxy, true, [n])[0]
    assert abs(got - picks.mean()) < 4 * picks.std() / math.sqrt(draws)


def test_unbiased_for_the_population_best_of_n():
    """Averaged over fresh pools, the estimate is E[true of best-of-n] itself (here 3 + 2n/(n+1))."""
    rng = np.random.default_rng(11)
    n, pool, reps = 4, 12, 4000
    true = rng.uniform(3, 5, (reps, pool))
    estimates = [bon_expectations(t, t, [n])[0] for t in true]
    want = 3 + 2 * n / (n + 1)
    assert abs(np.mean(estimates) - want) < 4 * np.std(estimates) / math.sqrt(reps)


def test_many_n_at_once_equals_one_at_a_time():
    rng = np.random.default_rng(5)
    proxy, true = rng.integers(0, 50, 2000).astype(float), rng.normal(size=2000)
    ns = [2000, 1, 37, 999, 2]
    together = bon_expectations(proxy, true, ns)
    assert together == pytest.approx([bon_expectations(proxy, true, [n])[0] for n in ns], rel=1e-12)


def test_estimate_means_over_groups_with_enough_samples():
    groups = [([1.0, 2.0, 3.0], [0.0, 1.0, 2.0]), ([5.0, 4.0], [10.0, 20.0])]
    result = estimate(groups, [1, 2, 3])
    assert result.groups == [2, 2, 1]
    assert result.true[0] == pytest.approx((1.0 + 15.0) / 2)
    assert result.true[1] == pytest.approx((brute_force([1, 2, 3], [0, 1, 2], 2) + 10.0) / 2)
    assert result.true[2] == pytest.approx(2.0)
    per_group = np.array([1.0, 15.0])
    assert result.true_stderr[0] == pytest.approx(per_group.std(ddof=1) / math.sqrt(2))
    assert result.true_stderr[2] is None  # one group: no spread to measure
    assert result.kl_bound == pytest.approx([0.0, math.log(2) - 0.5, math.log(3) - 2 / 3])


def test_estimate_without_true_reports_proxy_only():
    result = estimate([([1.0, 2.0], None)], [1, 2])
    assert result.true == [None, None] and result.proxy == pytest.approx([1.5, 2.0])


def test_bad_input_is_refused():
    with pytest.raises(InputError, match="more than"):
        estimate([([1.0, 2.0], [1.0, 2.0])], [3])
    with pytest.raises(InputError, match="at least 1"):
        bon_expectations([1.0], [1.0], [0])
    with pytest.raises(InputError, match="finite"):
        bon_expectations([1.0, float("nan")], [1.0, 2.0], [1])
    with pytest.raises(InputError, match="every sample or for none"):
        estimate([([1.0], [1.0]), ([2.0], None)], [1])


def test_midranks_and_geometric_ns():
    assert midranks([1.0, 2.0, 2.0, 3.0]) == pytest.approx([0.0, 0.5, 0.5, 1.0])
    ns = geometric_ns(10_000, 50)
    assert ns[0] == 1 and ns[-1] == 10_000 and np.all(np.diff(ns) > 0)
