"""The unbiased best-of-n estimator against the notebook's subset-sampling Monte Carlo.

Usage: python bench/bench_bon.py [--samples 10000] [--replicates 200] [--seed 0]

Data: the best-of-n notebook's toy (x uniform on [0, 4], true 5 − |x − 2|,
proxy = true + U(−0.1, 0.1)).

1. Every n = 1 … N from one pool of N samples: the estimator (all n at once,
   chunked) against Monte Carlo at the same sample budget (for each n, the N
   samples split at random into ⌊N/n⌋ disjoint n-subsets, best-of-n of each).
   Time and peak traced memory (tracemalloc sees numpy's buffers) of each.
2. Variance at equal sample budget: `replicates` fresh pools of N samples; for
   a few n, the variance across pools of each estimate, and their ratio
   (Monte Carlo / unbiased: > 1 means the estimator is the lower-variance one).
   Repeated for small pools (N = 16, 64), the size of a real prompt's candidate set.
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc

import numpy as np

from preflab.training.bestofn.estimator import bon_expectations
from preflab.training.demos.bon import toy_samples


def subset_monte_carlo(rng: np.random.Generator, proxy: np.ndarray, true: np.ndarray, n: int) -> float:
    """Best-of-n over ⌊N/n⌋ disjoint random n-subsets of the pool: each sample used at most once."""
    blocks = proxy.size // n
    picks = rng.permutation(proxy.size)[: blocks * n].reshape(blocks, n)
    best = picks[np.arange(blocks), proxy[picks].argmax(axis=1)]
    return float(true[best].mean())


def measure(func):
    tracemalloc.start()
    start = time.perf_counter()
    result = func()
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return result, seconds, peak / 2**20


def all_n(samples: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    true, proxy = toy_samples(rng, samples)
    ns = np.arange(1, samples + 1)
    fast, fast_s, fast_mb = measure(lambda: bon_expectations(proxy, true, ns))
    slow, slow_s, slow_mb = measure(lambda: np.array([subset_monte_carlo(rng, proxy, true, n) for n in ns]))
    print(f"## every n = 1 … {samples:,} from one pool of N = {samples:,}")
    print(f"unbiased estimator : {fast_s:8.3f} s   peak {fast_mb:8.1f} MiB")
    print(f"subset Monte Carlo : {slow_s:8.3f} s   peak {slow_mb:8.1f} MiB")
    print(
        f"time ratio (MC / estimator): {slow_s / fast_s:.2f}×;  an N × N float64 matrix would be "
        f"{samples * samples * 8 / 2**20:,.0f} MiB"
    )
    for n in sorted({n for n in (1, 2, 16, 256, 2048, samples) if n <= samples}):
        print(f"  n = {n:>6}: estimator {fast[n - 1]:.4f}   Monte Carlo {slow[n - 1]:.4f}")
    print()
    return {
        "samples": samples,
        "estimator_s": fast_s,
        "monte_carlo_s": slow_s,
        "estimator_peak_mib": fast_mb,
        "monte_carlo_peak_mib": slow_mb,
    }


def variance(samples: int, replicates: int, ns: list[int], seed: int) -> dict:
    rng = np.random.default_rng(seed)
    ns = sorted({n for n in ns if n <= samples})
    fast = np.empty((replicates, len(ns)))
    slow = np.empty((replicates, len(ns)))
    start = time.perf_counter()
    for r in range(replicates):
        true, proxy = toy_samples(rng, samples)
        fast[r] = bon_expectations(proxy, true, ns)
        slow[r] = [subset_monte_carlo(rng, proxy, true, n) for n in ns]
    seconds = time.perf_counter() - start
    print(
        f"## variance across {replicates} pools of N = {samples:,} (equal budget: both see the same N samples)"
        f"  [{seconds:.1f} s]"
    )
    print(f"{'n':>6}  {'mean (est.)':>11}  {'sd estimator':>12}  {'sd Monte Carlo':>14}  {'variance ratio':>14}")
    ratios = {}
    for j, n in enumerate(ns):
        ratio = slow[:, j].var(ddof=1) / fast[:, j].var(ddof=1) if fast[:, j].var() > 0 else float("inf")
        ratios[n] = ratio if np.isfinite(ratio) else None
        print(
            f"{n:>6}  {fast[:, j].mean():>11.4f}  {fast[:, j].std(ddof=1):>12.2e}  "
            f"{slow[:, j].std(ddof=1):>14.2e}  {ratio:>14.2f}"
        )
    print()
    return {"samples": samples, "replicates": replicates, "seconds": seconds, "variance_ratio_by_n": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--replicates", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    report = {"all_n": all_n(args.samples, args.seed)}
    report["variance"] = [variance(args.samples, args.replicates, [2, 8, 32, 128, 512, 2048], args.seed + 1)]
    for small in (64, 16):
        report["variance"].append(
            variance(small, max(args.replicates, 2000), [2, 4, 8, small // 2, small], args.seed + small)
        )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
