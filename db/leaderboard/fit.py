"""Bradley–Terry fits, vectorised: many bootstrap samples at once, each by Newton's method.

FastChat's conventions (Chatbot Arena's `rating_systems.py`), so the numbers compare:

- P(a beats b) = 1 / (1 + 10^((R_b − R_a) / 400)): the logit is α·(r_a − r_b) with α = ln 10,
  and a rating is R = 400·r + 1000;
- a tie is half a win to each side (the outcome 0.5 in the logistic likelihood);
- an L2 penalty (λ/2)·‖θ‖² on the summed log-likelihood. FastChat's plain fit has none; a
  small one here (`L2`, a hundredth) keeps a model that never lost finite and moves real
  ratings by far less than an Elo point. Its style control uses 0.5 (`STYLE_L2`).

The penalty and the likelihood's gradient both sum to zero over the ratings, so the fit's
mean is 0. Where the ratings sit is a convention: `centre` puts each group of models that met
(directly or through others) at a weighted mean of 0 (1000 on the Elo scale), each model weighing
min(its battles, K) (`centre_weights`: K is 50, or a tenth of the group's median battles per
model where that is more), unless a model is named as the anchor. With every model at K battles
or more it is the plain mean, FastChat's and arena-rank's; a newcomer with 3 battles weighs 3
against the others' 50 or more each, so it barely moves them. The price, and why no centre
avoids it, is in docs/guides/leaderboard.md: where a model's weight grows (under K battles), one
more win can lower its shown rating, never its rating against any other model.

The plain fit sees the battles reduced to unordered pairs of models: for each, the
battles and the score of the first (its wins plus half its ties). A bootstrap sample
changes only those two numbers, so `fit_pairs` solves B samples at once: each Newton
step is a batch of n×n solves (the Hessian is a weighted graph Laplacian), started from
the full data's solution, which lies close to every sample's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import expit

ALPHA = math.log(10.0)  # logit per unit of r: base 10
SCALE = 400.0  # Elo points per unit of r
OFFSET = 1000.0  # the (weighted) mean rating, or the anchor's
CENTRE_CAP = 50  # battles past which a model weighs no more in its group's centre (at least)
CENTRE_SHARE = 10  # ... nor past a tenth of the group's median battles per model
L2 = 0.01  # the plain fit's penalty
STYLE_L2 = 0.5  # FastChat's style-control penalty
MAX_STEP = 2.0  # the largest Newton step in r (800 Elo), so a far start cannot overshoot
TOLERANCE = 1e-9  # in r: 4e-7 Elo
MAX_ITERATIONS = 100


@dataclass
class Pairs:
    """Battles reduced to the unordered pairs of models that met: `i` < `j`, model indices."""

    i: np.ndarray
    j: np.ndarray
    n_models: int

    def __len__(self) -> int:
        return len(self.i)


def fit_pairs(
    pairs: Pairs, score: np.ndarray, total: np.ndarray, *, l2: float = L2, start: np.ndarray | None = None
) -> np.ndarray:
    """Ratings r (natural units) maximising the penalised BT likelihood, for one sample or a batch.

    Args:
        score: (P,) or (B, P): the first model's wins plus half the ties, per pair.
        total: the same shape: the battles of each pair.
        l2: λ of the penalty (λ/2)·‖r‖².
        start: (n,) or (B, n) ratings to start from (default zeros).

    Returns:
        (n,) or (B, n) ratings; their mean is 0.
    """
    single = np.ndim(score) == 1
    score, total = np.atleast_2d(score).astype(np.float64), np.atleast_2d(total).astype(np.float64)
    batch, n = score.shape[0], pairs.n_models
    r = np.zeros((batch, n)) if start is None else np.array(np.broadcast_to(start, (batch, n)), dtype=np.float64)
    i, j = pairs.i, pairs.j
    # D: pairs × models, +1 for the first model, −1 for the second: the gradient is a product with it.
    d = np.zeros((len(pairs), n))
    d[np.arange(len(pairs)), i] = 1.0
    d[np.arange(len(pairs)), j] = -1.0
    ones = np.ones((n, n))  # the Laplacian's null direction (all equal) is never a step's
    eye = np.eye(n)
    active = np.ones(batch, dtype=bool)
    for _ in range(MAX_ITERATIONS):
        rb, sb, tb = r[active], score[active], total[active]
        p = expit(ALPHA * (rb[:, i] - rb[:, j]))
        grad = -ALPHA * (sb - tb * p) @ d + l2 * rb
        v = ALPHA * ALPHA * tb * p * (1.0 - p)
        hess = np.zeros((len(rb), n, n))
        hess[:, i, j] = -v
        hess[:, j, i] = -v
        hess -= hess.sum(axis=2)[:, :, None] * eye  # the diagonal: minus each row's sum
        hess += l2 * eye + ones / n
        step = np.linalg.solve(hess, grad[:, :, None])[:, :, 0]
        largest = np.abs(step).max(axis=1)
        step *= np.minimum(1.0, MAX_STEP / np.maximum(largest, 1e-300))[:, None]
        r[active] = rb - step
        done = largest < TOLERANCE
        if done.all():
            break
        active[np.flatnonzero(active)[done]] = False
    r -= r.mean(axis=1, keepdims=True)
    return r[0] if single else r


def fit_contextual(
    a: np.ndarray,
    b: np.ndarray,
    outcome: np.ndarray,
    features: np.ndarray,
    n_models: int,
    *,
    weights: np.ndarray | None = None,
    l2: float = STYLE_L2,
    start: np.ndarray | None = None,
) -> np.ndarray:
    """Style control: BT with covariates, logit = α·(r_a − r_b) + f·β, penalised on (r, β) alike.

    FastChat's contextual BT (`fit_contextual_bt`), solved by Newton's method.

    Args:
        a, b: (N,) model indices of each battle; outcome: (N,) 1, 0.5 or 0 for a.
        features: (N, k) the battle's normalised style differences (a minus b).
        weights: (N,) how often each battle counts (a bootstrap sample's draws; default once).
        start: (n + k,) parameters to start from.

    Returns:
        (n + k,) the ratings r, then the coefficients β.
    """
    n, k = n_models, features.shape[1]
    w = np.ones(len(a)) if weights is None else weights.astype(np.float64)
    theta = np.zeros(n + k) if start is None else np.array(start, dtype=np.float64)
    pair = a.astype(np.int64) * n + b  # the ordered pair: its Hessian entries gather by bincount
    eye = np.eye(n + k)
    for _ in range(MAX_ITERATIONS):
        r, beta = theta[:n], theta[n:]
        p = expit(ALPHA * (r[a] - r[b]) + features @ beta)
        g = w * (p - outcome)
        grad = np.empty(n + k)
        grad[:n] = ALPHA * (np.bincount(a, g, n) - np.bincount(b, g, n))
        grad[n:] = features.T @ g
        grad += l2 * theta
        v = w * p * (1.0 - p)
        hess = np.zeros((n + k, n + k))
        laplacian = np.bincount(pair, v, n * n).reshape(n, n)
        laplacian = laplacian + laplacian.T
        hess[:n, :n] = ALPHA * ALPHA * (np.diag(laplacian.sum(axis=1)) - laplacian)
        vf = v[:, None] * features
        cross = ALPHA * (
            np.stack([np.bincount(a, vf[:, c], n) - np.bincount(b, vf[:, c], n) for c in range(k)], 1)
            if k
            else np.zeros((n, 0))
        )
        hess[:n, n:] = cross
        hess[n:, :n] = cross.T
        hess[n:, n:] = features.T @ vf
        hess += l2 * eye
        step = np.linalg.solve(hess, grad)
        largest = np.abs(step).max()
        theta -= step * min(1.0, MAX_STEP / max(largest, 1e-300))
        if largest < TOLERANCE:
            break
    return theta


def centre_cap(played: np.ndarray) -> float:
    """K of a group whose models played `played` battles: the larger of `CENTRE_CAP` and a tenth of their median.

    On a board of thousands of battles per model, a newcomer of 50 is light too.
    """
    return max(float(CENTRE_CAP), float(np.median(played)) / CENTRE_SHARE)


def centre_weights(played: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Each model's weight in its group's centre: min(its battles, its group's `centre_cap`)."""
    played = np.asarray(played, dtype=np.float64)
    cap = np.empty_like(played)
    for g in np.unique(groups):
        cap[groups == g] = centre_cap(played[groups == g])
    return np.minimum(played, cap)


def centre(r: np.ndarray, groups: np.ndarray, weights: np.ndarray, anchor: int | None = None) -> np.ndarray:
    """Ratings r moved, group by group, so that each group's weighted mean is 0 (the anchor's group: the anchor 0).

    A constant per group changes no difference within it, so the likelihood is the same;
    groups that never met have no common scale, and each gets its own centre.
    """
    out = np.array(r, dtype=np.float64)
    for g in np.unique(groups):
        members = groups == g
        if anchor is not None and members[anchor]:
            out[members] -= out[anchor]
        else:
            out[members] -= np.average(out[members], weights=weights[members])
    return out


def to_elo(r: np.ndarray, anchor: int | None = None) -> np.ndarray:
    """Ratings on the Elo scale: 400 per unit, the mean (or model `anchor`) at 1000; works on a batch's rows."""
    elo = SCALE * np.asarray(r, dtype=np.float64) + OFFSET
    if anchor is not None:
        elo = elo - (elo[..., [anchor]] - OFFSET)
    return elo


def win_probability(rating_a, rating_b):
    """P(a beats b) for Elo-scale ratings (a tie counted as half a win)."""
    return 1.0 / (1.0 + np.power(10.0, (np.asarray(rating_b) - np.asarray(rating_a)) / SCALE))
