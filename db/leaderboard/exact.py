"""Intervals for models of few battles, where the bootstrap's are not calibrated: exact test inversion.

A bootstrap sample of a model with 3 battles redraws 0 to 6 of them, and its percentile
interval covers the truth far less than 95% of the time (the leaderboard guide has the
numbers). For such a model (`few_battles` says which and why) the interval is the set of
ratings θ that its score does not reject, Clopper–Pearson's construction on the score's
Poisson-binomial law: each battle is won with P = expit(α·(θ − c_opponent)), the opponents'
ratings held at the fit's (`c`, centred), and a tie counted as half a win. The lower end is
the θ where P(score ≥ s) = 2.5%, the upper where P(score ≤ s) = 2.5%, with s rounded down
and up (a half point from ties: the wider interval). A model that lost every battle has no
lower end (−∞): no rating is too low for such a record; one that won every battle has no upper end.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import expit, log_expit

from preflab.db.leaderboard.battles import Battles
from preflab.db.leaderboard.fit import ALPHA

LEVEL = 0.95
FEW_BATTLES = 10  # fewer battles, or rankings holding the model, than this: the exact interval, and no rank
HELD_SHARE = 0.99  # held by fewer bootstrap samples than this share: the same
REACH = 20.0  # natural units (8,000 Elo) past the opponents within which an end is sought


def record(battles: Battles) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each model's battles, wins, ties and losses."""
    n = len(battles.models)
    played = np.bincount(battles.a, minlength=n) + np.bincount(battles.b, minlength=n)
    a_won, tie, b_won = battles.outcome == 1.0, battles.outcome == 0.5, battles.outcome == 0.0
    wins = np.bincount(battles.a[a_won], minlength=n) + np.bincount(battles.b[b_won], minlength=n)
    ties = np.bincount(battles.a[tie], minlength=n) + np.bincount(battles.b[tie], minlength=n)
    return played, wins, ties, played - wins - ties


def rankings_holding(battles: Battles) -> np.ndarray:
    """Each model's rankings: how many of the rankings it battled in (its independent draws in a bootstrap).

    A ranking of seven replies gives each of its models six battles, all from one person's order:
    they come and go together in a bootstrap sample, so a model of four such rankings is sparse
    however many battles they make. One battle per ranking (Chatbot Arena's) counts the battles.
    """
    n = len(battles.models)
    pairs = np.unique(np.concatenate([battles.group * n + battles.a, battles.group * n + battles.b]))
    return np.bincount(pairs % n, minlength=n) if n else np.zeros(0, dtype=np.int64)


def few_battles(
    played: np.ndarray,
    wins: np.ndarray,
    ties: np.ndarray,
    losses: np.ndarray,
    held: np.ndarray | None = None,
    rounds: int = 0,
    rankings: np.ndarray | None = None,
) -> list[str | None]:
    """Per model, why its interval is the exact test's and it is not ranked, or None where the bootstrap's serves.

    Args:
        held: bootstrap samples holding each model, of `rounds` (None: no bootstrap).
        rankings: the rankings holding each model (`rankings_holding`; default: one per battle).
    """
    rankings = played if rankings is None else rankings
    reasons: list[str | None] = []
    for k, n in enumerate(played):
        record = (
            "lost every battle" if wins[k] + ties[k] == 0 else "won every battle" if losses[k] + ties[k] == 0 else ""
        )
        if n < FEW_BATTLES:
            reasons.append(
                f"only {n} battle{'s' if n != 1 else ''}"
                + (f", {'all lost' if record[0] == 'l' else 'all won'}" if record else "")
            )
        elif rankings[k] < FEW_BATTLES:
            reasons.append(
                f"{n} battles from only {rankings[k]} ranking{'s' if rankings[k] != 1 else ''}"
                + (f", {'all lost' if record[0] == 'l' else 'all won'}" if record else "")
            )
        elif record:
            reasons.append(record)
        elif held is not None and rounds and held[k] < HELD_SHARE * rounds:
            reasons.append(f"in {held[k] / rounds:.0%} of bootstrap rounds")
        else:
            reasons.append(None)
    return reasons


def ranked_weights(weights: np.ndarray, few: list[str | None], groups: np.ndarray) -> np.ndarray:
    """The centre's weights of the ranked models only (a group of none keeps them all): what centres a sample.

    A model of few battles swings from sample to sample; in the samples' centre it would
    swing every other model with it (the board's own centre holds it at its small weight).
    """
    kept = np.where([why is None for why in few], weights, 0.0)
    for g in np.unique(groups):
        if not kept[groups == g].any():
            kept[groups == g] = weights[groups == g]
    return kept


def score_interval(offsets: np.ndarray, score: float, level: float = LEVEL) -> tuple[float, float]:
    """The ratings θ (natural units) not rejected by a score `score` over battles won with P = expit(α·θ + offset).

    Returns:
        (lower, upper); −inf or +inf where no rating is rejected on that side.
    """
    offsets = np.asarray(offsets, dtype=np.float64)
    n = len(offsets)
    tail = (1.0 - level) / 2.0
    at_least, at_most = math.floor(score + 1e-9), math.ceil(score - 1e-9)
    centre = -offsets / ALPHA
    bracket = (float(centre.min()) - REACH, float(centre.max()) + REACH)

    def upper_tail(theta: float) -> float:  # P(score ≥ at_least), rising with θ
        if at_least == n:
            return float(log_expit(ALPHA * theta + offsets).sum()) - math.log(tail)
        return math.log(max(_pmf(expit(ALPHA * theta + offsets))[at_least:].sum(), 1e-300)) - math.log(tail)

    def lower_tail(theta: float) -> float:  # P(score ≤ at_most), falling with θ
        if at_most == 0:
            return float(log_expit(-(ALPHA * theta + offsets)).sum()) - math.log(tail)
        return math.log(max(_pmf(expit(ALPHA * theta + offsets))[: at_most + 1].sum(), 1e-300)) - math.log(tail)

    lower = -math.inf if at_least <= 0 else _root(upper_tail, *bracket, rising=True)
    upper = math.inf if at_most >= n else _root(lower_tail, *bracket, rising=False)
    return lower, upper


def exact_intervals(
    battles: Battles, point: np.ndarray, models, logit: np.ndarray | None = None, level: float = LEVEL
) -> dict[int, tuple[float, float]]:
    """`score_interval` of each of `models` against its opponents' centred ratings `point` (natural units).

    Args:
        logit: (N,) what else each battle's log-odds for side a holds (style control's f·β), or None.
    """
    out = {}
    for i in models:
        as_a, as_b = battles.a == i, battles.b == i
        opponents = np.concatenate([battles.b[as_a], battles.a[as_b]])
        score = float(battles.outcome[as_a].sum() + (1.0 - battles.outcome[as_b]).sum())
        offsets = -ALPHA * point[opponents]
        if logit is not None:
            offsets = offsets + np.concatenate([logit[as_a], -logit[as_b]])
        out[int(i)] = score_interval(offsets, score, level)
    return out


def _root(f, lo: float, hi: float, *, rising: bool) -> float:
    """Where a monotone f crosses 0 in [lo, hi], by bisection to 1e-7 (scipy.optimize takes 0.7 s to import)."""
    while hi - lo > 1e-7:
        mid = (lo + hi) / 2.0
        if (f(mid) < 0.0) == rising:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def _pmf(p: np.ndarray) -> np.ndarray:
    """The Poisson-binomial law of a sum of Bernoulli(p): P(sum = 0..n)."""
    pmf = np.zeros(len(p) + 1)
    pmf[0] = 1.0
    for k, q in enumerate(p):
        pmf[1 : k + 2] = pmf[1 : k + 2] * (1.0 - q) + pmf[: k + 1] * q
        pmf[0] *= 1.0 - q
    return pmf
