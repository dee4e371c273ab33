"""`preflab demo bon`: the best-of-n notebook's toy, with a known answer.

The "model" outputs x uniform on [0, 4]; the true reward is 5 − |x − 2| (uniform
on [3, 5]); the proxy is the true reward plus uniform noise in ±0.1. Without the
noise best-of-n's true reward would be exactly 3 + 2n/(n+1); with it the true
reward saturates at 5 while the proxy overshoots to ≈ 5.08 (the notebook reports
4.30 → 5.00 true and 4.28 → 5.08 proxy for n = 2 … 2048).
"""

from __future__ import annotations

from dataclasses import dataclass

import click
import numpy as np

from preflab.console import echo_json
from preflab.settings import data_dir
from preflab.training.bestofn.estimator import BonEstimate, estimate, geometric_ns
from preflab.training.bestofn.fit import fit_gao
from preflab.training.bestofn.kl import kl_bound

NOTEBOOK_NS = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]


def toy_samples(rng: np.random.Generator, shape) -> tuple[np.ndarray, np.ndarray]:
    """(true, proxy) rewards of the notebook's toy model."""
    x = rng.uniform(0.0, 4.0, shape)
    true = 5.0 - np.abs(x - 2.0)
    return true, true + rng.uniform(-0.1, 0.1, shape)


def monte_carlo(rng: np.random.Generator, n: int, trials: int) -> tuple[float, float]:
    """The notebook's naive estimate: `trials` fresh best-of-n draws; mean (true, proxy) of the picks."""
    true, proxy = toy_samples(rng, (trials, n))
    pick = proxy.argmax(axis=1)
    rows = np.arange(trials)
    return float(true[rows, pick].mean()), float(proxy[rows, pick].mean())


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

    def as_json(self) -> dict:
        return {key: value for key, value in self.__dict__.items() if key != "curve"}


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


@click.command("bon")
@click.option("--samples", "-N", default=10_000, show_default=True, type=click.IntRange(2, 1_000_000),
              help="Samples the unbiased estimator reuses for every n.")
@click.option("--trials", default=100, show_default=True, type=click.IntRange(1, 100_000),
              help="Fresh best-of-n draws per n for the naive Monte Carlo (the notebook's 100).")
@click.option("--seed", default=0, show_default=True, help="Random seed.")
@click.option("--out", type=click.Path(dir_okay=False), help="Where to write the plot (default: DATA_DIR/bon-demo.png).")
@click.option("--json", "as_json", is_flag=True, help="Print the numbers as JSON.")
def demo_command(samples, trials, seed, out, as_json):
    """The best-of-n notebook's toy: true vs proxy reward as n grows, and the plot.

    Example: preflab demo bon --seed 1 --out bon.png
    """
    from preflab.training.bestofn.plot import goodhart_plot

    result = run_demo(samples, trials, seed)
    curve = result.curve
    fit = fit_gao(curve.kl_bound, curve.true)
    path = goodhart_plot(curve, out or data_dir() / "bon-demo.png", fit, title="notebook toy")
    if as_json:
        echo_json(result.as_json() | {"samples": samples, "trials": trials, "seed": seed,
                                      "fit": fit.as_json(), "plot": str(path)})
        return
    click.echo(f"{'n':>5}  {'true':>6}  {'proxy':>6}  {'true MC':>7}  {'proxy MC':>8}  {'no noise':>8}  {'KL':>6}")
    for row in zip(result.n, result.true, result.proxy, result.true_mc, result.proxy_mc, result.no_noise, result.kl):
        n, t, p, tm, pm, nn, kl = row
        click.echo(f"{n:>5}  {t:>6.3f}  {p:>6.3f}  {tm:>7.3f}  {pm:>8.3f}  {nn:>8.3f}  {kl:>6.3f}")
    click.echo(f"true/proxy: unbiased estimator over {samples:,} samples (every n-subset); "
               f"MC: {trials} fresh best-of-n draws per n; no noise: 3 + 2n/(n+1); KL: log n − (n−1)/n")
    click.echo(f"notebook: true 4.30 → 5.00, proxy 4.28 → 5.08; here: true {result.true[0]:.2f} → "
               f"{result.true[-1]:.2f}, proxy {result.proxy[0]:.2f} → {result.proxy[-1]:.2f}; plot: {path}")
