"""Points on the Goodhart frontier, and what they say.

A point is one optimised policy: its KL(π‖π_ref), its mean proxy reward, its
mean true reward and its true-reward win rate over the reference. Best-of-n
points come in closed form from the reference distribution (exact KL, Beirami et
al.); trained policies' from their own exact distributions in the counting world,
or from Monte-Carlo samples on real data (`kl_stderr` then says how sure).
Gao et al.'s R(d) = d(α − βd) is fitted per method to the true reward against
d = √KL, anchored at the reference's own reward.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from preflab.training.bestofn.fit import GaoFit, fit_gao
from preflab.training.bestofn.kl import bon_distribution, kl_exact

MASS_FLOOR = 1e-7  # outputs rarer than this under a policy are left out of its proxy mean (their mass is reported)


@dataclass
class Point:
    method: str  # "best-of-n", "dpo", "simpo", "rl", "reference", …
    setting: str  # what was turned: "n=16", "beta=0.1", …
    kl: float  # KL(π ‖ π_ref), nats
    proxy: float | None  # mean proxy reward
    true: float | None  # mean true reward
    win_rate: float | None  # P(true reward beats the reference's) + ½ P(tie)
    kl_stderr: float = 0.0  # 0 where the KL is exact
    model_version: str | None = None
    coverage: float = 1.0  # the policy mass the proxy mean was taken over

    @property
    def sqrt_kl(self) -> float:
        return math.sqrt(max(self.kl, 0.0))

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "sqrt_kl": self.sqrt_kl}


def _win_rates(true: np.ndarray, ref_probs: np.ndarray, probs: np.ndarray) -> float:
    """Mean over prompts of P(R*(y) > R*(y')) + ½ P(=), y ~ probs, y' ~ ref_probs (rows are prompts)."""
    rates = []
    for r, p_ref, p in zip(true, ref_probs, probs):
        levels, inverse = np.unique(r, return_inverse=True)
        mass = np.bincount(inverse, weights=p_ref, minlength=levels.size)
        below = np.concatenate([[0.0], np.cumsum(mass)[:-1]])
        rates.append(float(p @ (below + 0.5 * mass)[inverse]))
    return float(np.mean(rates))


def policy_point(
    method: str,
    setting: str,
    logp: np.ndarray,
    ref_logp: np.ndarray,
    true: np.ndarray,
    proxy,
    model_version: str | None = None,
) -> Point:
    """A policy's exact point from its log-probabilities of every output (prompts × outputs).

    Args:
        true: R* of every output; proxy: a `world.ProxyScores` (scored where the policy has mass).
    """
    probs, ref_probs = np.exp(logp), np.exp(ref_logp)
    with np.errstate(invalid="ignore"):  # outputs the policy never writes add nothing (0 · log 0 = 0)
        kl = float(np.mean(np.where(probs > 0, probs * (logp - ref_logp), 0.0).sum(axis=1)))
    kept = probs >= MASS_FLOOR
    scores = proxy.where(kept)
    mass = np.where(kept, probs, 0.0).sum(axis=1)
    proxy_mean = float(np.mean(np.nansum(np.where(kept, probs * scores, 0.0), axis=1) / mass))
    return Point(
        method,
        setting,
        max(kl, 0.0),
        proxy_mean,
        float(np.mean((probs * true).sum(axis=1))),
        _win_rates(true, ref_probs, probs),
        model_version=model_version,
        coverage=float(mass.mean()),
    )


def bon_points(
    ref_logp: np.ndarray, true: np.ndarray, proxy, ns: Sequence[int], method: str = "best-of-n"
) -> list[Point]:
    """Best-of-n on the proxy, n in `ns`: exact KL, exact mean rewards and win rate, averaged over prompts."""
    ref = np.exp(ref_logp)
    kept = ref >= MASS_FLOOR
    scores = proxy.where(kept)
    rows = {n: {"kl": [], "proxy": [], "true": [], "probs": []} for n in ns}
    for i in range(len(ref)):
        p = np.where(kept[i], ref[i], 0.0)
        p = p / p.sum()
        r = np.where(kept[i], scores[i], 0.0)
        kls = kl_exact(p, r, list(ns))
        for n, kl in zip(ns, kls):
            q = bon_distribution(p, r, n)
            row = rows[n]
            row["kl"].append(kl)
            row["proxy"].append(float(q @ r))
            row["true"].append(float(q @ true[i]))
            row["probs"].append(q)
    coverage = float(np.where(kept, ref, 0.0).sum(axis=1).mean())
    return [
        Point(
            method,
            f"n={n}",
            float(np.mean(row["kl"])),
            float(np.mean(row["proxy"])),
            float(np.mean(row["true"])),
            _win_rates(true, ref, np.array(row["probs"])),
            coverage=coverage,
        )
        for n, row in rows.items()
    ]


def by_method(points: Sequence[Point]) -> dict[str, list[Point]]:
    """Each method's points in order of KL, the reference (KL 0) first."""
    out: dict[str, list[Point]] = {}
    for point in points:
        out.setdefault(point.method, []).append(point)
    return {method: sorted(group, key=lambda p: p.kl) for method, group in out.items()}


def fit_methods(points: Sequence[Point], baseline: float) -> dict[str, GaoFit | None]:
    """Gao et al.'s fit of the true reward per method, anchored at the reference's true reward."""
    fits: dict[str, GaoFit | None] = {}
    for method, group in by_method(points).items():
        usable = [p for p in group if p.true is not None and p.kl > 1e-9]
        fits[method] = None
        if len(usable) >= 2:
            fits[method] = fit_gao([p.kl for p in usable], [p.true for p in usable], baseline=baseline)
    return fits


def findings(points: Sequence[Point], baseline: float, min_kl: float = 0.05, min_fall: float = 0.1) -> dict[str, Any]:
    """What the chart shows, as numbers: the most efficient method, and where true reward turns down.

    `per_nat` is a method's best true-reward gain per nat of KL over its points
    with KL ≥ `min_kl` (tiny KLs divide noise by almost nothing). A method
    `overoptimised` when its true reward peaks before its largest KL and falls
    after, by more than `min_fall` of its gain over the baseline, while its proxy
    reward keeps rising.
    """
    methods: dict[str, Any] = {}
    for method, group in by_method(points).items():
        scored = [p for p in group if p.true is not None]
        if not scored:
            continue
        peak = max(scored, key=lambda p: p.true)
        last = scored[-1]
        efficient = [p for p in scored if p.kl >= min_kl]
        best = max(efficient, key=lambda p: (p.true - baseline) / p.kl, default=None)
        falls = (
            last is not peak
            and peak.true - last.true > min_fall * max(peak.true - baseline, 0.0)
            and last.proxy is not None
            and peak.proxy is not None
            and last.proxy > peak.proxy
        )
        methods[method] = {
            "peak_true": peak.true,
            "peak_kl": peak.kl,
            "peak_setting": peak.setting,
            "per_nat": None if best is None else (best.true - baseline) / best.kl,
            "per_nat_setting": None if best is None else best.setting,
            "overoptimised": falls,
            "after_peak": (
                {
                    "kl": last.kl,
                    "setting": last.setting,
                    "true_drop": peak.true - last.true,
                    "proxy_rise": last.proxy - peak.proxy,
                }
                if falls
                else None
            ),
        }
    ranked = sorted(
        (m for m in methods if methods[m]["per_nat"] is not None), key=lambda m: methods[m]["per_nat"], reverse=True
    )
    highest = max(methods, key=lambda m: methods[m]["peak_true"], default=None)
    return {
        "baseline_true": baseline,
        "methods": methods,
        "most_true_reward_per_nat": ranked[0] if ranked else None,
        "highest_true_reward": highest,
    }


def describe(found: dict[str, Any], sweep: Sequence[dict[str, Any]] = ()) -> list[str]:
    """`findings` (and a comparisons sweep) as sentences: what the chart shows."""
    methods = found["methods"]
    lines = []
    best, highest = found["most_true_reward_per_nat"], found["highest_true_reward"]
    if best:
        lines.append(
            f"most true reward per nat of KL: {best} (+{methods[best]['per_nat']:.3f} per nat at "
            f"{methods[best]['per_nat_setting']})"
        )
    if highest:
        top = methods[highest]
        lines.append(
            f"highest true reward: {highest}, {top['peak_true']:.3f} at {top['peak_setting']} "
            f"(KL {top['peak_kl']:.2f}; the reference has {found['baseline_true']:.3f})"
        )
    for method, m in methods.items():
        if m["overoptimised"]:
            after = m["after_peak"]
            lines.append(
                f"{method}: true reward peaks at {m['peak_setting']} (KL {m['peak_kl']:.2f}, "
                f"{m['peak_true']:.3f}) and falls by {after['true_drop']:.3f} by {after['setting']} "
                f"(KL {after['kl']:.2f}) while the proxy rises by {after['proxy_rise']:.3f}"
            )
        else:
            lines.append(
                f"{method}: no fall of the true reward within the KL it reached "
                f"(peak {m['peak_true']:.3f} at {m['peak_setting']}, KL {m['peak_kl']:.2f})"
            )
    for row in sweep:
        lines.append(
            f"proxy from {row['comparisons']:,} comparisons: best-of-n's true reward peaks at "
            f"{row['peak_setting']} (KL {row['peak_kl']:.2f}, {row['peak_true']:.3f}); at the largest n "
            f"{row['true_at_largest_n']:.3f}"
        )
    return lines
