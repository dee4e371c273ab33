"""The unbiased best-of-n estimator.

For one prompt with N samples sorted by proxy reward, ascending (rank k = 1 … N),
a uniformly random n-subset has its proxy maximum at rank k with probability
C(k−1, n−1) / C(N, n). Averaging the true reward with these weights is the mean
over all C(N, n) subsets at once: the same N samples serve every n ≤ N, and the
result has lower variance than drawing best-of-n by Monte Carlo from them.

Ties: best-of-n picks uniformly among tied maxima. A tie level of g samples with
a samples strictly below it holds the maximum with probability
[C(a+g, n) − C(a, n)] / C(N, n), shared equally by its g members. By the
hockey-stick identity that difference is the sum of the level's untied weights
C(k−1, n−1) / C(N, n), k = a+1 … a+g, so each sample's untied weight is applied
to its level's mean: the tie rule without subtracting two nearly equal numbers.

Stability: each weight is exp(log C(k−1, n−1) − log C(N, n)) from a table of
log-gamma values, so no binomial is ever formed (N = 10⁶ is as safe as N = 10)
and every weight keeps its relative precision. All n are done at once, a chunk
of n at a time, so no N × N matrix is held; ranks whose weight underflows to 0
at every n of a chunk are skipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln

from preflab.errors import InputError
from preflab.training.bestofn.kl import kl_bound

# exp() of anything below this is 0.0 in float64: such ranks carry no weight.
UNDERFLOW = -745.2
# Elements per (n × rank) block: 16 MiB per float64 temporary.
CHUNK_ELEMENTS = 1 << 21


def _log_ratio(m, n, total: int, lg: np.ndarray) -> np.ndarray:
    """log C(m, n) / C(total, n), broadcast over integer arrays; −inf where m < n.

    `lg[j]` is log Γ(j), so log C(m, n) = lg[m+1] − lg[n+1] − lg[m−n+1]; lg[n+1] cancels.
    """
    m, n = np.broadcast_arrays(np.asarray(m, dtype=np.int64), np.asarray(n, dtype=np.int64))
    valid = m >= n
    mm = np.where(valid, m, n)  # any in-range index; masked out below
    out = lg[mm + 1] - lg[mm - n + 1] - lg[total + 1] + lg[total - n + 1]
    return np.where(valid, out, -np.inf)


def _rank_weights(first: int, ns: np.ndarray, total: int, lg: np.ndarray) -> np.ndarray:
    """(len(ns), total − first): C(k−1, n−1)/C(N, n) for ranks k = first+1 … N (0 where k < n)."""
    # log C(k−1, n−1) − log C(N, n) = lg[k] − lg[k−n+1] + log n − lg[N+1] + lg[N−n+1], with
    # lg[j] = log Γ(j). Only lg[k−n+1] is 2-D; for k < n its index is clipped to 0, where
    # lg[0] = log Γ(0) = +inf makes the weight exp(−inf) = 0.
    ranks = np.arange(first + 1, total + 1)
    gap = ranks[None, :] - ns[:, None]
    np.maximum(gap, -1, out=gap)
    gap += 1
    log_w = np.take(lg, gap)
    np.subtract((lg[ranks] - lg[total + 1])[None, :] + (np.log(ns) + lg[total - ns + 1])[:, None], log_w, out=log_w)
    return np.exp(log_w, out=log_w)


def _check_ns(ns, size: int) -> np.ndarray:
    ns = np.atleast_1d(np.asarray(ns))
    if ns.size == 0:
        raise InputError("give at least one n")
    if not np.issubdtype(ns.dtype, np.integer):
        if not np.all(np.isfinite(ns)) or not np.all(ns == np.round(ns)):
            raise InputError("n must be a whole number")
        ns = ns.astype(np.int64)
    if ns.min() < 1:
        raise InputError(f"n must be at least 1, not {int(ns.min())}")
    if ns.max() > size:
        raise InputError(f"n = {int(ns.max())} is more than the {size} samples available")
    return ns.astype(np.int64)


def _as_samples(proxy) -> np.ndarray:
    proxy = np.asarray(proxy, dtype=float).ravel()
    if proxy.size == 0:
        raise InputError("no samples")
    if not np.all(np.isfinite(proxy)):
        raise InputError("proxy rewards must be finite numbers")
    return proxy


def bon_expectations(proxy, values, ns) -> np.ndarray:
    """E[values of the best-of-n pick] for each n, from one group's N samples.

    Args:
        proxy: (N,) proxy rewards; the pick is the proxy maximum, ties broken uniformly.
        values: (N,) or (N, k) quantities to average (true reward, proxy reward, …).
        ns: the n values, each 1 ≤ n ≤ N.

    Returns:
        (len(ns),) or (len(ns), k), in the order of `ns`.
    """
    proxy = _as_samples(proxy)
    total = proxy.size
    ns = _check_ns(ns, total)
    vals = np.asarray(values, dtype=float)
    flat = vals.ndim == 1
    vals = vals.reshape(total, -1)
    order = np.argsort(proxy, kind="stable")
    _, inverse, counts = np.unique(proxy[order], return_inverse=True, return_counts=True)
    # Each sample stands for its tie level's mean: see the module docstring.
    level_vals = np.zeros((counts.size, vals.shape[1]))
    np.add.at(level_vals, inverse, vals[order])
    level_vals /= counts[:, None]
    ranked = level_vals[inverse]
    lg = gammaln(np.arange(total + 2, dtype=float))

    by_n = np.argsort(ns, kind="stable")
    sorted_ns = ns[by_n]
    out = np.empty((ns.size, vals.shape[1]))
    start = 0
    while start < ns.size:
        # The weight of rank k is at most C(k, n)/C(N, n), which falls as n grows: ranks where
        # that underflows at the chunk's smallest n carry no weight at any n of the chunk.
        bound = _log_ratio(np.arange(1, total + 1), sorted_ns[start], total, lg)
        first = int(np.searchsorted(bound, UNDERFLOW))
        stop = min(ns.size, start + max(1, CHUNK_ELEMENTS // (total - first)))
        weights = _rank_weights(first, sorted_ns[start:stop], total, lg)
        out[by_n[start:stop]] = weights @ ranked[first:]
        start = stop
    return out[:, 0] if flat else out


def geometric_ns(largest: int, count: int = 300) -> np.ndarray:
    """About `count` n values spread evenly in log n over 1 … largest (1 and largest included)."""
    grid = np.geomspace(1, largest, num=min(count, largest))
    return np.unique(np.concatenate([np.round(grid).astype(np.int64), [1, largest]]))


def selection_probs(proxy, ns) -> np.ndarray:
    """(len(ns), N): the chance best-of-n picks each sample. For small N: it is N × len(ns)."""
    proxy = _as_samples(proxy)
    return bon_expectations(proxy, np.eye(proxy.size), ns)


def midranks(values) -> np.ndarray:
    """Each sample's share of the *other* samples it beats (ties ½), in [0, 1]."""
    values = np.asarray(values, dtype=float)
    if values.size < 2:
        return np.full(values.size, 0.5)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    below = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return (below[inverse] + 0.5 * (counts[inverse] - 1)) / (values.size - 1)


@dataclass
class BonEstimate:
    """Best-of-n expectations per n, averaged over the groups (prompts) that have ≥ n samples."""

    n: list[int]
    true: list[float | None]
    proxy: list[float]
    true_stderr: list[float | None]
    proxy_stderr: list[float | None]
    groups: list[int]
    kl_bound: list[float]
    # The chance the pick beats another sample of its group on the true reward (ties ½).
    # It compares with the group's other samples, not an independent draw, so for n
    # near N it reads a little high; the plot uses it, the JSON does not.
    true_win: list[float | None]

    def as_json(self) -> dict:
        return {
            "n": self.n,
            "true": self.true,
            "proxy": self.proxy,
            "true_stderr": self.true_stderr,
            "groups": self.groups,
            "kl_bound": self.kl_bound,
        }


class _Welford:
    """Running mean and variance over groups, vectorised over n (groups too small for an n are skipped)."""

    def __init__(self, size: int, width: int):
        self.count = np.zeros(size, dtype=np.int64)
        self.mean = np.zeros((size, width))
        self.m2 = np.zeros((size, width))

    def add(self, index: np.ndarray, x: np.ndarray) -> None:
        self.count[index] += 1
        delta = x - self.mean[index]
        self.mean[index] += delta / self.count[index][:, None]
        self.m2[index] += delta * (x - self.mean[index])

    def stderr(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            var = self.m2 / (self.count[:, None] - 1)
            return np.where(self.count[:, None] > 1, np.sqrt(var / self.count[:, None]), np.nan)


def _floats(values: np.ndarray) -> list[float | None]:
    return [None if not math.isfinite(v) else float(v) for v in values]


def estimate(groups: Iterable[tuple[Sequence[float], Sequence[float] | None]], ns) -> BonEstimate:
    """Best-of-n estimates over groups of samples (one group per prompt).

    Args:
        groups: (proxy rewards, true rewards or None) per group; true is all or none.
        ns: the n values; each needs at least one group with ≥ n samples.
    """
    groups = [(_as_samples(p), None if t is None else np.asarray(t, dtype=float).ravel()) for p, t in groups]
    if not groups:
        raise InputError("no samples")
    has_true = {t is not None for _, t in groups}
    if len(has_true) > 1:
        raise InputError("give a true reward for every sample or for none")
    with_true = has_true.pop()
    largest = max(p.size for p, _ in groups)
    if np.size(ns) and np.max(ns) > largest:
        raise InputError(f"n = {int(np.max(ns))} is more than the largest group's {largest} samples")
    ns = _check_ns(ns, largest)
    width = 3 if with_true else 1
    stats = _Welford(ns.size, width)
    for proxy, true in groups:
        if true is not None and true.size != proxy.size:
            raise InputError("each sample needs one proxy and one true reward")
        if true is not None and not np.all(np.isfinite(true)):
            raise InputError("true rewards must be finite numbers")
        usable = np.flatnonzero(ns <= proxy.size)
        if usable.size == 0:
            continue
        columns = [proxy] if true is None else [proxy, true, midranks(true)]
        stats.add(usable, bon_expectations(proxy, np.column_stack(columns), ns[usable]))
    stderr = stats.stderr()
    nan = np.full(ns.size, np.nan)
    return BonEstimate(
        n=[int(n) for n in ns],
        true=_floats(stats.mean[:, 1] if with_true else nan),
        proxy=_floats(stats.mean[:, 0]),
        true_stderr=_floats(stderr[:, 1] if with_true else nan),
        proxy_stderr=_floats(stderr[:, 0]),
        groups=[int(c) for c in stats.count],
        kl_bound=[float(k) for k in kl_bound(ns)],
        true_win=_floats(stats.mean[:, 2] if with_true else nan),
    )
