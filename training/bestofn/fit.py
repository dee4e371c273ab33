"""Gao et al. (2022)'s scaling law for best-of-n: true reward against d = √KL.

    R(d) = d (α − β d)

R is measured from the reference policy's reward (n = 1, d = 0). α is how fast
the true reward rises at first; β > 0 is the overoptimisation that bends it back
down, peaking at d* = α / 2β. The fit is linear least squares in (α, β), each point
weighted by its share of the d axis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from preflab.errors import InputError


@dataclass
class GaoFit:
    alpha: float
    beta: float
    baseline: float  # the reward at d = 0, the reference policy's
    r2: float  # of the fitted rewards
    d_peak: float | None  # α/2β where β > 0 (the true reward's maximum), else None
    kl_peak: float | None
    reward_peak: float | None

    def predict(self, kl) -> np.ndarray:
        d = np.sqrt(np.asarray(kl, dtype=float))
        return self.baseline + d * (self.alpha - self.beta * d)

    def as_json(self) -> dict:
        return dict(self.__dict__)


def fit_gao(kl, reward, baseline: float | None = None) -> GaoFit:
    """Fit R(d) = d(α − βd) to (KL, reward) points.

    Args:
        kl: KL divergences in nats (log n − (n−1)/n for best-of-n).
        reward: the true reward at each KL.
        baseline: the reward at KL 0; default: the reward of a KL-0 point (n = 1) if
            there is one, else a third fitted parameter.
    """
    kl = np.asarray(kl, dtype=float).ravel()
    reward = np.asarray(reward, dtype=float).ravel()
    keep = np.isfinite(kl) & np.isfinite(reward)
    kl, reward = kl[keep], reward[keep]
    if kl.size != reward.size or np.any(kl < 0):
        raise InputError("the fit needs one non-negative KL per reward")
    d = np.sqrt(kl)
    # Weight each point by its share of the d axis, so n = 1 … N (dense at large KL) and
    # powers of two fit the same curve instead of the dense tail dominating.
    order = np.argsort(d, kind="stable")
    edges = np.concatenate([[d[order[0]]], (d[order][1:] + d[order][:-1]) / 2, [d[order[-1]]]])
    weight = np.empty_like(d)
    weight[order] = np.diff(edges)
    weight = np.sqrt(np.maximum(weight, 1e-12 * max(float(d.max()), 1e-12)))
    at_zero = d == 0
    if baseline is None and at_zero.any():
        baseline = float(reward[at_zero].mean())
    if baseline is None:
        if np.count_nonzero(~at_zero) < 3:
            raise InputError("the fit needs at least three points with KL > 0")
        design = np.column_stack([np.ones_like(d), d, -d * d])
        (baseline, alpha, beta), *_ = np.linalg.lstsq(design * weight[:, None], reward * weight, rcond=None)
    else:
        if np.count_nonzero(~at_zero) < 2:
            raise InputError("the fit needs at least two points with KL > 0")
        design = np.column_stack([d, -d * d])
        (alpha, beta), *_ = np.linalg.lstsq(design * weight[:, None], (reward - baseline) * weight, rcond=None)
    fitted = baseline + d * (alpha - beta * d)
    total = float(((reward - reward.mean()) ** 2).sum())
    r2 = 1.0 - float(((reward - fitted) ** 2).sum()) / total if total > 0 else 1.0
    d_peak = kl_peak = reward_peak = None
    if beta > 0:
        d_peak = float(alpha / (2 * beta))
        kl_peak = d_peak**2 if d_peak >= 0 else None
        reward_peak = float(baseline + alpha * alpha / (4 * beta)) if d_peak >= 0 else None
        if d_peak < 0:
            d_peak = None
    return GaoFit(
        float(alpha), float(beta), float(baseline), r2 if math.isfinite(r2) else 0.0, d_peak, kl_peak, reward_peak
    )
