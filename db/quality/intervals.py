"""Shares over pairs with bootstrap intervals that resample prompts (a cluster bootstrap).

A ranking of n replies gives n·(n−1)/2 pairs that share their prompt and replies,
so a prompt's pairs are not independent draws: an interval over pairs would be
too narrow. Every interval here resamples prompts: each round draws as many
prompts as there are, with replacement, seeded, and a share in that round is
its hits among the pairs of the drawn prompts. One set of draws serves every
subset (and both models of a comparison), so their intervals and a paired
difference come from the same resamples.

Used by the reward-model bench (`preflab.training.reward_eval`: accuracy on
held-out pairs) and by the judges' board (`preflab.labelling.judges.trust`:
agreement with people).

Vectorised: a chunk of rounds is a (rounds × prompts) matrix of draw counts
(one `bincount` of uniform draws), and its shares are one matrix product with
the per-prompt sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
# Fewer prompts than this give no interval: resampling 1–4 prompts cannot show the spread (one prompt's
# pairs, all right, would give [1, 1]), and a judge or a category that small would look surest.
MIN_PROMPTS = 5
CELLS = 4_000_000  # draw counts held at once (rounds × prompts per chunk): 32 MB


@dataclass(frozen=True)
class Cell:
    """A share over some pairs, with its bootstrap interval (None: no pairs, or under MIN_PROMPTS prompts)."""

    value: float | None
    low: float | None
    high: float | None
    pairs: int
    prompts: int = 0

    def as_dict(self) -> dict:
        return {
            "accuracy": self.value,
            "low": self.low,
            "high": self.high,
            "pairs": self.pairs,
            "prompts": self.prompts,
        }


class Resampler:
    """Seeded cluster-bootstrap rounds over the prompts of a set of pairs.

    Args:
        clusters: each pair's prompt (any ids, one per pair).
        rounds: bootstrap rounds (0: point estimates with no interval).
        seed: the generator's seed; the same seed and prompts give the same draws.
        level: the intervals' coverage (0.95: the 2.5% and 97.5% quantiles).
    """

    def __init__(self, clusters, rounds: int = 1000, seed: int = 0, level: float = LEVEL):
        _, self.index = np.unique(np.asarray(clusters), return_inverse=True)
        self.index = self.index.reshape(-1)
        self.n_prompts = int(self.index.max()) + 1 if len(self.index) else 0
        self.rounds, self.seed, self.level = rounds, seed, level

    @classmethod
    def over_prompts(cls, n_prompts: int, rounds: int = 1000, seed: int = 0, level: float = LEVEL) -> Resampler:
        """A resampler of `n_prompts` prompts, for per-prompt tables (`ratios`)."""
        return cls(np.arange(n_prompts), rounds, seed, level)

    def ratios(self, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """(rounds × columns) resampled ratios Σ sums / Σ counts over the drawn prompts (NaN: nothing drawn).

        Args:
            sums, counts: (prompts × columns) per-prompt totals, in the order of the prompts' ids.
        """
        if not self.rounds or not self.n_prompts:
            return np.empty((0, sums.shape[1]))
        rng = np.random.default_rng(self.seed)
        k = self.n_prompts
        chunk = max(1, CELLS // k)
        out = []
        for start in range(0, self.rounds, chunk):
            rows = min(chunk, self.rounds - start)
            drawn = rng.integers(0, k, size=(rows, k)) + (np.arange(rows) * k)[:, None]
            weights = np.bincount(drawn.ravel(), minlength=rows * k).reshape(rows, k).astype(float)
            with np.errstate(invalid="ignore", divide="ignore"):
                out.append((weights @ sums) / (weights @ counts))
        return np.concatenate(out)

    def _per_prompt(self, values: np.ndarray, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        index = self.index if mask is None else self.index[mask]
        values = values if mask is None else values[mask]
        return (
            np.bincount(index, weights=values, minlength=self.n_prompts),
            np.bincount(index, minlength=self.n_prompts).astype(float),
        )

    def estimates(self, columns: list[tuple[np.ndarray, np.ndarray | None]]) -> np.ndarray:
        """(rounds × columns) resampled means, one column per (values, mask) (NaN: no pair drawn)."""
        if not columns or not self.rounds or not self.n_prompts:  # no columns: a breakdown with no group
            return np.empty((0, len(columns)))
        sums, counts = zip(*(self._per_prompt(np.asarray(v, dtype=float), m) for v, m in columns))
        return self.ratios(np.stack(sums, axis=1), np.stack(counts, axis=1))

    def cells(self, values: np.ndarray, masks: list[np.ndarray | None]) -> list[Cell]:
        """The share of `values` (0/1 per pair) within each mask, with its interval."""
        values = np.asarray(values, dtype=float)
        rounds = self.estimates([(values, mask) for mask in masks])
        out = []
        for j, mask in enumerate(masks):
            picked = values if mask is None else values[mask]
            if not len(picked):
                out.append(Cell(None, None, None, 0))
                continue
            prompts = len(np.unique(self.index if mask is None else self.index[mask]))
            low, high = interval(rounds[:, j], self.level) if len(rounds) and prompts >= MIN_PROMPTS else (None, None)
            out.append(Cell(float(picked.mean()), low, high, len(picked), prompts))
        return out


def interval(column: np.ndarray, level: float = LEVEL) -> tuple[float | None, float | None]:
    """The percentile interval of one column of resampled estimates (rounds that drew nothing left out)."""
    column = column[~np.isnan(column)]
    if not len(column):
        return None, None
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(column, [tail, 100 - tail])
    return float(low), float(high)


def paired_difference(resampler: Resampler, right_a: np.ndarray, right_b: np.ndarray) -> dict:
    """Accuracy of A minus accuracy of B on the same pairs: the difference, its interval and a p-value.

    The p-value is the bootstrap's two-sided one: twice the share of rounds at or
    past zero on the far side from the observed difference ((k + 1) / (rounds + 1),
    so it is never 0), capped at 1; 1 when the observed difference is 0. With fewer
    than MIN_PROMPTS prompts there is neither interval nor p-value. The pairs where
    exactly one model is right decide it; they are counted too.
    """
    right_a, right_b = np.asarray(right_a, dtype=bool), np.asarray(right_b, dtype=bool)
    diff = right_a.astype(float) - right_b.astype(float)
    observed = float(diff.mean()) if len(diff) else None
    enough = resampler.n_prompts >= MIN_PROMPTS
    rounds = resampler.estimates([(diff, None)])[:, 0] if len(diff) and enough else np.empty(0)
    low, high = interval(rounds, resampler.level) if len(rounds) else (None, None)
    p_value = None
    if len(rounds):
        rounds = rounds[~np.isnan(rounds)]
        far = (rounds <= 0) if observed > 0 else (rounds >= 0)
        p_value = 1.0 if observed == 0 else min(1.0, 2 * (int(far.sum()) + 1) / (len(rounds) + 1))
    return {
        "difference": observed,
        "low": low,
        "high": high,
        "p_value": p_value,
        "both_right": int((right_a & right_b).sum()),
        "only_this": int((right_a & ~right_b).sum()),
        "only_other": int((~right_a & right_b).sum()),
        "both_wrong": int((~right_a & ~right_b).sum()),
    }
