"""Saving a chart to a file: its folder made, at one resolution, for every chart training draws (best-of-n's
Goodhart picture, the Goodhart frontier, the self-rewarding loop)."""

from __future__ import annotations

from pathlib import Path

DPI = 110


def save_figure(fig, out: str | Path) -> Path:
    """Write `fig` to `out` (PNG, or any format matplotlib knows from the suffix); returns the path."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=DPI)
    return out
