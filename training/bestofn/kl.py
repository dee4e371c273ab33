"""KL divergence and win rate of the best-of-n policy against its reference.

For a discrete reference P with rewards r, best-of-n draws n outcomes from P and
keeps one with the highest reward (ties broken uniformly). With F = P[r ≤ ℓ] and
G = P[r < ℓ] at reward level ℓ, the pick lies on level ℓ with probability
Fⁿ − Gⁿ, shared by the level's outcomes in proportion to P, so

    KL(P_bon ‖ P) = Σ_ℓ (Fⁿ − Gⁿ) log((Fⁿ − Gⁿ) / (F − G)),
    win rate      = ½ Σ_ℓ (Fⁿ − Gⁿ)(F + G)      (against one draw from P, ties ½).

log n − (n−1)/n and n/(n+1) are what these become when P has no point masses;
for any P they are upper bounds (Beirami et al. 2024). Beirami et al.'s
estimator d_n(ε) reads the KL off the probability ε of each selected output.

Everything is computed from logs (log1p, expm1), so levels with tiny mass and
large n neither underflow to 0/0 nor lose their digits to cancellation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from preflab.errors import InputError

PROB_TOLERANCE = 1e-6


def kl_bound(n) -> np.ndarray:
    """log n − (n−1)/n: exact for a reference without point masses, an upper bound otherwise."""
    n = np.asarray(n, dtype=float)
    return np.log(n) - (n - 1.0) / n


def win_rate_bound(n) -> np.ndarray:
    """n/(n+1): best-of-n's win rate against the reference without point masses; an upper bound."""
    n = np.asarray(n, dtype=float)
    return n / (n + 1.0)


def check_distribution(probs: Sequence[float], rewards: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Validate a discrete reference: probabilities ≥ 0 summing to 1, one finite reward each."""
    p = np.asarray(probs, dtype=float).ravel()
    r = np.asarray(rewards, dtype=float).ravel()
    if p.size == 0:
        raise InputError("give at least one probability")
    if p.size != r.size:
        raise InputError(f"{p.size} probabilities but {r.size} rewards: give one reward per outcome")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise InputError("probabilities must be finite and non-negative")
    if not np.all(np.isfinite(r)):
        raise InputError("rewards must be finite numbers")
    total = float(p.sum())
    if abs(total - 1.0) > PROB_TOLERANCE:
        raise InputError(f"probabilities sum to {total:.6g}, not 1")
    return p / total, r


def _check_ns(ns) -> np.ndarray:
    ns = np.atleast_1d(np.asarray(ns))
    if ns.size == 0 or not np.all(np.isfinite(ns)) or np.any(ns < 1) or np.any(ns != np.round(ns)):
        raise InputError("n must be whole numbers ≥ 1")
    return ns.astype(np.int64)


@dataclass
class _Levels:
    mass: np.ndarray  # q: P[r = ℓ], per level, ascending reward
    log_f: np.ndarray  # log P[r ≤ ℓ]
    log_ratio: np.ndarray  # log(G/F) = log(1 − q/F); −inf on the lowest level
    f: np.ndarray
    g: np.ndarray
    inverse: np.ndarray  # level of each outcome with p > 0
    support: np.ndarray  # indices of outcomes with p > 0


def _levels(p: np.ndarray, r: np.ndarray) -> _Levels:
    support = np.flatnonzero(p > 0)  # outcomes best-of-n can never draw play no part
    levels, inverse = np.unique(r[support], return_inverse=True)
    q = np.bincount(inverse, weights=p[support], minlength=levels.size)
    # F = P[r ≤ ℓ] summed from the bottom is precise where F is small, 1 − P[r > ℓ] summed from
    # the top where F is near 1; take each where it is the precise one.
    below = np.cumsum(q)
    above = np.concatenate([np.cumsum(q[::-1])[::-1][1:], [0.0]])
    high = above < 0.5
    f = np.where(high, 1.0 - above, below).clip(q, 1.0)
    log_f = np.where(high, np.log1p(-np.minimum(above, 0.5)), np.log(f))
    g = np.concatenate([[0.0], below[:-1]])
    with np.errstate(divide="ignore"):
        log_ratio = np.log1p(-np.minimum(q / f, 1.0))
    return _Levels(q, log_f, log_ratio, f, g, inverse, support)


def _log_level_bon(lv: _Levels, ns: np.ndarray) -> np.ndarray:
    """(len(ns), levels): log(Fⁿ − Gⁿ) = n log F + log(1 − (G/F)ⁿ)."""
    n = ns[:, None].astype(float)
    with np.errstate(divide="ignore"):
        return n * lv.log_f[None, :] + np.log(-np.expm1(n * lv.log_ratio[None, :]))


def bon_distribution(probs, rewards, n: int) -> np.ndarray:
    """P_bon(y) for every outcome: the chance best-of-n picks it."""
    p, r = check_distribution(probs, rewards)
    lv = _levels(p, r)
    level = np.exp(_log_level_bon(lv, _check_ns([n])))[0]
    out = np.zeros_like(p)
    out[lv.support] = level[lv.inverse] * p[lv.support] / lv.mass[lv.inverse]
    return out


def kl_exact(probs, rewards, ns) -> np.ndarray:
    """KL(P_bon ‖ P) in nats, per n."""
    p, r = check_distribution(probs, rewards)
    lv = _levels(p, r)
    log_bon = _log_level_bon(lv, _check_ns(ns))
    with np.errstate(invalid="ignore"):
        terms = np.exp(log_bon) * (log_bon - np.log(lv.mass)[None, :])
    return np.nansum(terms, axis=1).clip(min=0.0)


def win_rate_exact(probs, rewards, ns) -> np.ndarray:
    """P(best-of-n beats one draw from P on reward) + ½ P(tie), per n."""
    p, r = check_distribution(probs, rewards)
    lv = _levels(p, r)
    bon = np.exp(_log_level_bon(lv, _check_ns(ns)))
    return 0.5 * bon @ (lv.f + lv.g)


def beirami_kl_log(log_eps, n) -> np.ndarray:
    """Beirami et al.'s d_n(ε), from log ε (ε = the reference probability of the selected output).

    d_n(ε) = (1−ε)ⁿ [log n + (n−1) log(1−ε) − (n−1)/n] + (1 − (1−ε)ⁿ) log((1 − (1−ε)ⁿ)/ε).
    Taking log ε keeps sequence probabilities of language-model outputs (e^−300) usable.
    """
    log_eps, n = np.broadcast_arrays(np.asarray(log_eps, dtype=float), np.asarray(n, dtype=float))
    if np.any(log_eps > 1e-12) or np.any(np.isnan(log_eps)):
        raise InputError("a probability ε must lie in (0, 1]")
    log_eps = np.minimum(log_eps, 0.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_keep = np.log1p(-np.exp(log_eps))  # log(1 − ε)
        stay = np.exp(n * log_keep)  # (1 − ε)ⁿ
        moved = -np.expm1(n * log_keep)  # 1 − (1 − ε)ⁿ
        first = stay * (np.log(n) + (n - 1.0) * log_keep - (n - 1.0) / n)
        second = moved * (np.log(moved) - log_eps)
    first = np.where(stay > 0, first, 0.0)
    second = np.where(moved > 0, second, 0.0)
    # ε so small that 1 − (1 − ε)ⁿ underflows: the limit ε → 0 is the bound.
    tiny = (moved == 0) & (log_eps < 0)
    return np.where(tiny, kl_bound(n), first + second)


def beirami_kl(eps, n) -> np.ndarray:
    """d_n(ε) from probabilities ε in (0, 1]."""
    eps = np.asarray(eps, dtype=float)
    if np.any(~(eps > 0)) or np.any(eps > 1 + 1e-12):
        raise InputError("a probability ε must lie in (0, 1]")
    return beirami_kl_log(np.log(np.minimum(eps, 1.0)), n)


def beirami_expected(probs, rewards, ns) -> np.ndarray:
    """E[d_n(ε)] when the selected output is drawn from best-of-n itself."""
    p, r = check_distribution(probs, rewards)
    lv = _levels(p, r)
    ns = _check_ns(ns)
    level = np.exp(_log_level_bon(lv, ns))  # (ns, levels)
    ps = p[lv.support]
    pick = level[:, lv.inverse] * (ps / lv.mass[lv.inverse])[None, :]
    d = beirami_kl_log(np.log(ps)[None, :], ns[:, None])
    return (pick * d).sum(axis=1)


@dataclass
class BonTheory:
    n: list[int]
    kl_exact: list[float]
    kl_bound: list[float]
    kl_beirami: list[float]
    win_rate: list[float]
    win_rate_bound: list[float]

    def as_json(self) -> dict:
        return dict(self.__dict__)


def theory(probs, rewards, ns) -> BonTheory:
    """Exact KL, its bound, Beirami's expected estimate, exact win rate and its bound, per n."""
    ns = _check_ns(ns)

    def floats(values) -> list[float]:
        return [float(v) if math.isfinite(v) else None for v in values]

    return BonTheory(
        n=[int(n) for n in ns],
        kl_exact=floats(kl_exact(probs, rewards, ns)),
        kl_bound=floats(kl_bound(ns)),
        kl_beirami=floats(beirami_expected(probs, rewards, ns)),
        win_rate=floats(win_rate_exact(probs, rewards, ns)),
        win_rate_bound=floats(win_rate_bound(ns)),
    )
