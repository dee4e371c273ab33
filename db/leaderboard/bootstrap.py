"""How sure the ratings are: a multinomial bootstrap over rankings, as Chatbot Arena's over battles.

A bootstrap sample draws as many rankings as there are, with replacement. Rankings
that give the same battles with the same outcomes (`patterns`) are interchangeable, so
a sample is a multinomial draw of how often each pattern occurs: FastChat's
`compute_bootstrap_bt`, where every ranking is one two-way battle and a pattern is a
(model_a, model_b, outcome) triple. With the same seed and the same battles, the draws
are FastChat's own. The 95% interval of each rating runs from the samples' 2.5% to
97.5% quantile, and models are ordered by the samples' median.

Style control fits battle by battle (each has its own covariates), so its samples are
drawn and fitted one after another, each started from the full data's solution.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

from preflab.db.leaderboard.battles import Battles
from preflab.db.leaderboard.fit import L2, STYLE_L2, Pairs, fit_contextual, fit_pairs

CHUNK = 250  # bootstrap samples fitted together: bounds the memory of a batch


class Cells:
    """Battles counted by (a, b, outcome) and the pairs of models they reduce to.

    `cell_pair`/`cell_first`/`cell_score` say, for each distinct (a, b, outcome), its
    unordered pair, whether a is the pair's first model, and a's score (1, 0.5, 0).
    """

    def __init__(self, battles: Battles):
        n = max(len(battles.models), 1)
        code = (battles.a * n + battles.b) * 3 + np.rint(battles.outcome * 2).astype(np.int64)
        self.codes, self.cell_of_battle = np.unique(code, return_inverse=True)
        self.cell_of_battle = self.cell_of_battle.reshape(-1)
        a, rest = np.divmod(self.codes, n * 3)
        b, kind = np.divmod(rest, 3)
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        keys, self.cell_pair = np.unique(lo * n + hi, return_inverse=True)
        self.cell_pair = self.cell_pair.reshape(-1)
        self.pairs = Pairs(keys // n, keys % n, len(battles.models))
        self.cell_first = a == lo
        self.cell_score = np.where(self.cell_first, kind / 2.0, 1.0 - kind / 2.0)

    def pair_totals(self, cell_counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(score, total) per pair from counts per cell; (C,) or (B, C)."""
        counts = np.atleast_2d(cell_counts)
        reduce = sparse.csr_matrix(
            (np.ones(len(self.codes)), (np.arange(len(self.codes)), self.cell_pair)),
            shape=(len(self.codes), len(self.pairs)),
        )
        total = np.asarray(counts @ reduce)
        score = np.asarray((counts * self.cell_score) @ reduce)
        if np.ndim(cell_counts) == 1:
            return score[0], total[0]
        return score, total


def patterns(battles: Battles, cells: Cells) -> tuple[np.ndarray, sparse.csr_matrix]:
    """(how many rankings show each pattern, patterns × cells: the battles a pattern gives).

    A pattern is a ranking's sorted cells. Every ranking of a two-way battle is one
    cell, and its patterns are the cells in order.
    """
    cell, group = cells.cell_of_battle, battles.group
    sizes = np.bincount(group)
    if (sizes == 1).all():
        kinds, counts = np.unique(cell, return_counts=True)
        incidence = sparse.csr_matrix(
            (np.ones(len(kinds)), (np.arange(len(kinds)), kinds)), shape=(len(kinds), len(cells.codes))
        )
        return counts, incidence
    order = np.lexsort((cell, group))
    cell_sorted = cell[order]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    rows, cols, all_counts, offset = [], [], [], 0
    for size in np.unique(sizes):
        which = np.flatnonzero(sizes == size)
        matrix = cell_sorted[starts[which][:, None] + np.arange(size)]  # one row per ranking of this size
        kinds, counts = np.unique(matrix, axis=0, return_counts=True)
        rows.append(np.repeat(np.arange(len(kinds)) + offset, size))
        cols.append(kinds.reshape(-1))
        all_counts.append(counts)
        offset += len(kinds)
    incidence = sparse.csr_matrix(
        (np.ones(sum(len(r) for r in rows)), (np.concatenate(rows), np.concatenate(cols))),
        shape=(offset, len(cells.codes)),
    )  # duplicates within a pattern add up
    return np.concatenate(all_counts), incidence


def bootstrap_ratings(
    battles: Battles, rounds: int, seed: int, start: np.ndarray, *, l2: float = L2, cells: Cells | None = None
) -> np.ndarray:
    """(rounds, n) ratings r of `rounds` bootstrap samples over rankings (natural units).

    Draws exactly as FastChat's `compute_bootstrap_bt` (`default_rng(seed).multinomial`
    over the patterns' frequencies); each chunk of samples is fitted together from `start`.
    """
    cells = cells or Cells(battles)
    counts, incidence = patterns(battles, cells)
    n = int(counts.sum())
    draws = np.random.default_rng(seed).multinomial(n=n, pvals=counts / counts.sum(), size=rounds)
    out = np.empty((rounds, len(battles.models)))
    for lo in range(0, rounds, CHUNK):
        cell_counts = np.asarray(draws[lo : lo + CHUNK].astype(np.float64) @ incidence)  # float: 10x scipy's int path
        score, total = cells.pair_totals(cell_counts)
        out[lo : lo + CHUNK] = fit_pairs(cells.pairs, score, total, l2=l2, start=start)
    return out


def bootstrap_style(battles: Battles, features: np.ndarray, rounds: int, seed: int, start: np.ndarray) -> np.ndarray:
    """(rounds, n + k) style-controlled parameters of bootstrap samples over rankings, one sample at a time."""
    rng = np.random.default_rng(seed)
    r = battles.rankings
    out = np.empty((rounds, len(start)))
    for s in range(rounds):
        drawn = np.bincount(rng.integers(0, r, size=r), minlength=r)
        out[s] = fit_contextual(
            battles.a,
            battles.b,
            battles.outcome,
            features,
            len(battles.models),
            weights=drawn[battles.group],
            l2=STYLE_L2,
            start=start,
        )
    return out


def intervals(samples: np.ndarray) -> dict[str, np.ndarray]:
    """Per model: the samples' median and 2.5% and 97.5% quantiles (FastChat's 95% interval)."""
    lower, median, upper = np.quantile(samples, [0.025, 0.5, 0.975], axis=0)
    return {"median": median, "lower": lower, "upper": upper}


def rank_by_interval(lower: np.ndarray, upper: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
    """Chatbot Arena's rank: 1 + the models whose interval lies wholly above this one's.

    With `groups` (each model's), only the models of its own group count: ratings of models
    that never met, directly or through others, do not compare.
    """
    above = lower[None, :] > upper[:, None]
    if groups is not None:
        above &= groups[None, :] == groups[:, None]
    return 1 + above.sum(axis=1)


def share_better(samples: np.ndarray) -> np.ndarray:
    """(n, n): the share of bootstrap samples in which model i's rating is above model j's."""
    return (samples[:, :, None] > samples[:, None, :]).mean(axis=0)
