"""The Goodhart frontier on one chart: every method's true and proxy reward against √KL.

Left: true reward (solid, filled markers) and proxy reward (dotted, hollow
markers) per method, Gao et al.'s fit of the true reward (dashed), the
reference's true reward as a grey line. Right: each method's true-reward win
rate over the reference. matplotlib is imported here only, on an Agg canvas of
its own (no pyplot state, no display).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from preflab.errors import ConfigError
from preflab.training.bestofn.fit import GaoFit
from preflab.training.figures import save_figure
from preflab.training.goodhart.frontier import Point, by_method

COLORS = {"best-of-n": "tab:blue", "dpo": "tab:green", "simpo": "tab:purple", "rl": "tab:red", "grpo": "tab:orange"}


def _color(method: str, index: int) -> str:
    if method in COLORS:
        return COLORS[method]
    return f"C{(index + 5) % 10}"


def frontier_chart(
    points: Sequence[Point],
    fits: dict[str, GaoFit | None],
    baseline: float,
    out: str | Path,
    title: str = "Goodhart frontier",
) -> Path:
    """Write the two-panel chart (PNG, or any format matplotlib knows from the suffix); returns its path."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError("charts need matplotlib: pip install 'preflab[ml]' (or just matplotlib)") from None

    fig = Figure(figsize=(12, 5), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    groups = by_method(points)
    largest = max((p.sqrt_kl for p in points), default=1.0) or 1.0
    left.axhline(baseline, color="0.6", linewidth=0.8, label="reference (true)")
    for i, (method, group) in enumerate(groups.items()):
        color = _color(method, i)
        d = np.array([p.sqrt_kl for p in group])
        err = np.array([p.kl_stderr / (2 * max(p.sqrt_kl, 1e-9)) for p in group])  # δ√KL = δKL / 2√KL
        true = np.array([np.nan if p.true is None else p.true for p in group])
        proxy = np.array([np.nan if p.proxy is None else p.proxy for p in group])
        left.errorbar(
            d, true, xerr=err if err.any() else None, color=color, marker="o", markersize=4, label=f"{method}: true"
        )
        left.plot(
            d,
            proxy,
            color=color,
            linestyle=":",
            marker="o",
            markersize=4,
            markerfacecolor="none",
            label=f"{method}: proxy",
        )
        fit = fits.get(method)
        if fit is not None:
            grid = np.linspace(0, max(d.max(), 1e-6) * 1.05, 100)
            left.plot(grid, fit.predict(grid**2), color=color, linestyle="--", alpha=0.6, linewidth=1)
        win = np.array([np.nan if p.win_rate is None else p.win_rate for p in group])
        right.plot(d, win, color=color, marker="o", markersize=4, label=method)
        for p, x, y in zip(group, d, true):
            if p.setting and np.isfinite(y) and method != "best-of-n":
                left.annotate(p.setting, (x, y), textcoords="offset points", xytext=(3, -9), fontsize=6, color=color)
    left.set_xlim(0, largest * 1.08)
    left.set_xlabel("√KL(π ‖ π_ref), √nats")
    left.set_ylabel("mean reward (true: solid; proxy: dotted; Gao fit: dashed)")
    left.set_title(f"{title}: reward against √KL")
    left.legend(fontsize=7, ncol=2)
    right.axhline(0.5, color="0.6", linewidth=0.8)
    right.set_xlim(0, largest * 1.08)
    right.set_xlabel("√KL(π ‖ π_ref), √nats")
    right.set_ylabel("true-reward win rate over the reference")
    right.set_title("win rate over the reference")
    right.legend(fontsize=8)
    return save_figure(fig, out)
