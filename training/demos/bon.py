"""`preflab demo bon`: the best-of-n notebook's toy, with a known answer.

The "model" outputs x uniform on [0, 4]; the true reward is 5 − |x − 2| (uniform
on [3, 5]); the proxy is the true reward plus uniform noise in ±0.1. Without the
noise best-of-n's true reward would be exactly 3 + 2n/(n+1); with it the true
reward saturates at 5 while the proxy overshoots to ≈ 5.08 (the notebook reports
4.30 → 5.00 true and 4.28 → 5.08 proxy for n = 2 … 2048).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from preflab.errors import ConfigError
from preflab.settings import data_dir
from preflab.training.bestofn.estimator import BonEstimate, estimate, geometric_ns
from preflab.training.bestofn.fit import GaoFit, fit_gao
from preflab.training.bestofn.kl import kl_bound

NOTEBOOK_NS = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]


def toy_samples(rng: np.random.Generator, shape) -> tuple[np.ndarray, np.ndarray]:
    """(true, proxy) rewards of the notebook's toy model."""
    x = rng.uniform(0.0, 4.0, shape)
    true = 5.0 - np.abs(x - 2.0)
    return true, true + rng.uniform(-0.1, 0.1, shape)


def toy_groups(samples: int = 10_000, seed: int = 0) -> list:
    """The toy as one group of best-of-n samples: [("toy", proxy rewards, true rewards)]."""
    true, proxy = toy_samples(np.random.default_rng(seed), samples)
    return [("toy", proxy, true)]


def monte_carlo(rng: np.random.Generator, n: int, trials: int) -> tuple[float, float]:
    """The notebook's naive estimate: `trials` fresh best-of-n draws; mean (true, proxy) of the picks."""
    true, proxy = toy_samples(rng, (trials, n))
    pick = proxy.argmax(axis=1)
    rows = np.arange(trials)
    return float(true[rows, pick].mean()), float(proxy[rows, pick].mean())


@dataclass
class BonDemoConfig:
    """How big the toy experiment is."""

    samples: int = field(
        default=10_000, metadata={"help": "Samples the unbiased estimator reuses for every n.", "flags": ("-N",)}
    )
    trials: int = field(
        default=100, metadata={"help": "Fresh best-of-n draws per n for the naive Monte Carlo (the notebook's 100)."}
    )
    seed: int = field(default=0, metadata={"help": "Random seed."})

    def __post_init__(self) -> None:
        if not 2 <= self.samples <= 1_000_000:
            raise ConfigError(f"--samples must be between 2 and 1,000,000, got {self.samples:,}")
        if not 1 <= self.trials <= 100_000:
            raise ConfigError(f"--trials must be between 1 and 100,000, got {self.trials:,}")


@dataclass
class DemoResult:
    n: list[int]
    true: list[float]
    proxy: list[float]
    true_mc: list[float]
    proxy_mc: list[float]
    no_noise: list[float]
    kl: list[float]
    curve: BonEstimate
    fit: GaoFit | None = None
    plot: Path | None = None

    def as_json(self) -> dict:
        out = {key: value for key, value in self.__dict__.items() if key not in ("curve", "fit", "plot")}
        return out | {"fit": self.fit.as_json() if self.fit else None, "plot": str(self.plot) if self.plot else None}


def run_demo(samples: int = 10_000, trials: int = 100, seed: int = 0) -> DemoResult:
    """The toy's best-of-n rewards from `samples` draws (unbiased) beside `trials`-draw Monte Carlo."""
    rng = np.random.default_rng(seed)
    true, proxy = toy_samples(rng, samples)
    ns = [n for n in NOTEBOOK_NS if n <= samples]
    # n from 1 to N, spread in log n, from the same samples: the plot's curve and the table's rows.
    curve = estimate([(proxy, true)], np.union1d(geometric_ns(samples), ns))
    row = {n: i for i, n in enumerate(curve.n)}
    mc = [monte_carlo(rng, n, trials) for n in ns]
    return DemoResult(
        n=ns,
        true=[curve.true[row[n]] for n in ns],
        proxy=[curve.proxy[row[n]] for n in ns],
        true_mc=[t for t, _ in mc],
        proxy_mc=[p for _, p in mc],
        no_noise=[3.0 + 2.0 * n / (n + 1) for n in ns],
        kl=[float(k) for k in kl_bound(ns)],
        curve=curve,
    )


def bon_demo(config: BonDemoConfig, out: str | Path | None = None) -> DemoResult:
    """The demo: the numbers, Gao et al.'s fit of the true reward, and the plot (default DATA_DIR/bon-demo.png)."""
    from preflab.training.bestofn.plot import goodhart_plot

    result = run_demo(config.samples, config.trials, config.seed)
    result.fit = fit_gao(result.curve.kl_bound, result.curve.true)
    result.plot = goodhart_plot(result.curve, out or data_dir() / "bon-demo.png", result.fit, title="notebook toy")
    return result
