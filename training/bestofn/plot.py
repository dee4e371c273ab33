"""The Goodhart picture: true and proxy reward against KL, and win rate against KL.

matplotlib is imported here only, and draws on an Agg canvas of its own, so
importing preflab never loads it and no display or pyplot state is touched.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from preflab.errors import ConfigError
from preflab.training.bestofn.estimator import BonEstimate
from preflab.training.bestofn.fit import GaoFit
from preflab.training.bestofn.kl import win_rate_bound
from preflab.training.figures import save_figure


def _array(values) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def goodhart_plot(est: BonEstimate, out: str | Path, fit: GaoFit | None = None, title: str = "Best-of-n") -> Path:
    """Write a two-panel PNG (or any format matplotlib knows from the suffix); returns the path."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError("plots need matplotlib: pip install 'preflab[ml]' (or just matplotlib)") from None

    kl = np.array(est.kl_bound)
    n = np.array(est.n)
    true, proxy = _array(est.true), _array(est.proxy)
    stderr = _array(est.true_stderr)

    fig = Figure(figsize=(11, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)

    left.plot(kl, proxy, color="tab:orange", label="proxy reward")
    if np.isfinite(true).any():
        left.plot(kl, true, color="tab:blue", label="true reward")
        if np.isfinite(stderr).any():
            left.fill_between(kl, true - stderr, true + stderr, color="tab:blue", alpha=0.2, linewidth=0)
        if fit is not None:
            grid = np.linspace(0, kl.max(), 200)
            left.plot(
                grid,
                fit.predict(grid),
                "--",
                color="tab:blue",
                alpha=0.8,
                label=f"fit R(d) = d({fit.alpha:.3g} − {fit.beta:.3g}d), d = √KL",
            )
    # Mark powers of two so the KL axis can be read as n.
    marks = [i for i, v in enumerate(n) if v & (v - 1) == 0 and v > 1]
    for i in marks[:: max(1, len(marks) // 8)]:
        left.annotate(
            f"n={n[i]}",
            (kl[i], proxy[i]),
            textcoords="offset points",
            xytext=(0, 6),
            fontsize=7,
            ha="center",
            color="0.4",
        )
    left.set_xlabel("KL(best-of-n ‖ reference), nats: log n − (n−1)/n")
    left.set_ylabel("reward")
    left.set_title(f"{title}: reward against KL")
    left.legend(fontsize=8)

    right.plot(kl, win_rate_bound(n), color="0.4", label="n/(n+1) (no ties)")
    win = _array(est.true_win)
    if np.isfinite(win).any():
        right.plot(kl, win, color="tab:blue", label="true-reward win rate (estimated)")
    right.set_xlabel("KL, nats")
    right.set_ylabel("win rate against the reference")
    right.set_ylim(0.4, 1.0)
    right.set_title("win rate against KL")
    right.legend(fontsize=8)

    return save_figure(fig, out)
