"""Gao et al.'s R(d) = d(α − βd) fit recovers known curves and their peak."""

from __future__ import annotations

import numpy as np
import pytest

from preflab.errors import InputError
from preflab.training.bestofn.fit import fit_gao
from preflab.training.bestofn.kl import kl_bound


def test_recovers_alpha_beta_and_the_peak():
    n = np.arange(1, 5001)
    kl = kl_bound(n)
    d = np.sqrt(kl)
    reward = 2.0 + d * (0.9 - 0.2 * d)
    fit = fit_gao(kl, reward)
    assert (fit.alpha, fit.beta, fit.baseline) == pytest.approx((0.9, 0.2, 2.0))
    assert fit.r2 == pytest.approx(1.0)
    assert fit.d_peak == pytest.approx(0.9 / 0.4)
    assert fit.kl_peak == pytest.approx((0.9 / 0.4) ** 2)
    assert fit.reward_peak == pytest.approx(2.0 + 0.81 / 0.8)
    assert fit.predict([fit.kl_peak])[0] == pytest.approx(fit.reward_peak)


def test_noisy_points_and_no_baseline_point():
    rng = np.random.default_rng(0)
    kl = kl_bound(np.arange(2, 2000))
    d = np.sqrt(kl)
    reward = 0.5 + d * (1.2 - 0.3 * d) + rng.normal(0, 0.01, d.size)
    fit = fit_gao(kl, reward)  # no n = 1 point: the baseline is fitted too
    assert fit.alpha == pytest.approx(1.2, abs=0.05)
    assert fit.beta == pytest.approx(0.3, abs=0.02)
    assert fit.baseline == pytest.approx(0.5, abs=0.05)


def test_dense_large_n_does_not_dominate():
    """n = 1 … N and powers of two give the same fit: points are weighted by their share of d."""
    n_all = np.arange(1, 4097)
    n_pow2 = 2 ** np.arange(13)

    def reward(n):
        d = np.sqrt(kl_bound(n))
        return d * (1.0 - 0.1 * d) + 0.05 * np.sin(3 * d)  # not exactly the law

    a, b = fit_gao(kl_bound(n_all), reward(n_all)), fit_gao(kl_bound(n_pow2), reward(n_pow2))
    assert a.alpha == pytest.approx(b.alpha, rel=0.1) and a.beta == pytest.approx(b.beta, rel=0.15)


def test_monotone_rewards_have_no_peak():
    kl = kl_bound(np.arange(1, 100))
    fit = fit_gao(kl, np.sqrt(kl) * 0.5 + 0.1 * kl)
    assert fit.beta < 0 and fit.d_peak is None and fit.kl_peak is None


def test_too_few_points():
    with pytest.raises(InputError, match="at least two points"):
        fit_gao([0.0, 0.2], [1.0, 1.1])
