"""How sure the ratings are: a multinomial bootstrap over rankings, as Chatbot Arena's over battles.

A bootstrap sample draws as many rankings as there are, with replacement. Rankings
that give the same battles with the same outcomes (`patterns`) are interchangeable, so
a sample is a multinomial draw of how often each pattern occurs: FastChat's
`compute_bootstrap_bt`, where every ranking is one two-way battle and a pattern is a
(model_a, model_b, outcome) triple. With the same seed and the same battles, the draws
are FastChat's own. The 95% interval of each rating runs from the samples' 2.5% to
97.5% quantile, and models are ordered by the samples' median.

A sample that holds no battle of a model says nothing about it: the fit would leave it
where the penalty puts it (the centre, 1000), so it is NaN there and left out of that
model's quantiles (`held`). So is a model whose battles in the sample no longer join it to
its group's main part (the part weighing most in the centre): its distance from the rest is
then the penalty's, not the data's. Each sample is centred as the full data's fit is
(`fit.centre`), on the models it holds: shifted so that their weighted mean lies where the
fit puts them (`centred`), so that a model missing from a sample does not move the others.

Style control fits battle by battle (each has its own covariates), so its samples are
drawn and fitted one after another, each started from the full data's solution.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import connected_components

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
    battles: Battles,
    rounds: int,
    seed: int,
    start: np.ndarray,
    *,
    l2: float = L2,
    cells: Cells | None = None,
    weights: np.ndarray | None = None,
    anchor: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(rounds, n) ratings r of `rounds` bootstrap samples over rankings (natural units), and which hold which model.

    Draws exactly as FastChat's `compute_bootstrap_bt` (`default_rng(seed).multinomial`
    over the patterns' frequencies); each chunk of samples is fitted together from `start`.

    Args:
        weights, anchor: the centre's (`fit.centre_weights`; default each model's battles), which say
            which part of a group that falls apart in a sample is its main part (`held_models`).

    Returns:
        (samples, held): the fits as they come (not centred), and (rounds, n) booleans (`held_models`).
    """
    cells = cells or Cells(battles)
    counts, incidence = patterns(battles, cells)
    n = int(counts.sum())
    draws = np.random.default_rng(seed).multinomial(n=n, pvals=counts / counts.sum(), size=rounds)
    out = np.empty((rounds, len(battles.models)))
    held = np.empty((rounds, len(battles.models)), dtype=bool)
    weights = _played(battles) if weights is None else weights
    for lo in range(0, rounds, CHUNK):
        cell_counts = np.asarray(draws[lo : lo + CHUNK].astype(np.float64) @ incidence)  # float: 10x scipy's int path
        score, total = cells.pair_totals(cell_counts)
        out[lo : lo + CHUNK] = fit_pairs(cells.pairs, score, total, l2=l2, start=start)
        held[lo : lo + CHUNK] = held_models(cells.pairs, total, weights, anchor)
    return out, held


def bootstrap_style(
    battles: Battles,
    features: np.ndarray,
    rounds: int,
    seed: int,
    start: np.ndarray,
    *,
    weights: np.ndarray | None = None,
    anchor: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(rounds, n + k) style-controlled parameters of bootstrap samples over rankings, one at a time, and held."""
    rng = np.random.default_rng(seed)
    r = battles.rankings
    cells = Cells(battles)
    pair_of_battle = cells.cell_pair[cells.cell_of_battle]
    weights = _played(battles) if weights is None else weights
    out = np.empty((rounds, len(start)))
    held = np.empty((rounds, len(battles.models)), dtype=bool)
    for s in range(rounds):
        drawn = np.bincount(rng.integers(0, r, size=r), minlength=r)[battles.group]
        out[s] = fit_contextual(
            battles.a,
            battles.b,
            battles.outcome,
            features,
            len(battles.models),
            weights=drawn,
            l2=STYLE_L2,
            start=start,
        )
        total = np.bincount(pair_of_battle, weights=drawn, minlength=len(cells.pairs))
        held[s] = held_models(cells.pairs, total, weights, anchor)[0]
    return out, held


def _played(battles: Battles) -> np.ndarray:
    n = len(battles.models)
    return np.bincount(battles.a, minlength=n) + np.bincount(battles.b, minlength=n)


def groups_of(pairs: Pairs, played: np.ndarray) -> np.ndarray:
    """Each model's group (0: the group of the most battles), models joined by the pairs that met."""
    n = pairs.n_models
    graph = sparse.csr_matrix((np.ones(len(pairs)), (pairs.i, pairs.j)), shape=(n, n))
    parts, label = connected_components(graph, directed=False)
    size = np.bincount(label, weights=played, minlength=parts)  # twice the group's battles
    first = np.unique(label, return_index=True)[1]  # each group's first model
    order = np.lexsort((first, -size))  # the most battles first; then the group met first
    number = np.empty(parts, dtype=np.int64)
    number[order] = np.arange(parts)
    return number[label]


def held_models(pairs: Pairs, total: np.ndarray, weights: np.ndarray, anchor: int | None = None) -> np.ndarray:
    """(B, n): whether each sample holds each model, from the battles per pair in each sample ((P,) or (B, P)).

    A sample holds a model when the model's battles in it join it to the main part of its
    group: of the parts of the group that still met in the sample, the one holding the
    anchor, else the one of the most weight in the centre. A part needs two models. The
    parts of all samples are found at once: each model takes the least label of those it
    met, until no label changes.
    """
    total = np.atleast_2d(total)
    n = pairs.n_models
    out = np.ones((len(total), n), dtype=bool)
    rows = np.flatnonzero(~(total > 0).all(axis=1))  # most samples hold every pair: nothing to do
    if not len(rows):
        return out
    met = total[rows] > 0
    label = np.broadcast_to(np.arange(n), (len(rows), n)).copy()
    flat = np.arange(len(rows))[:, None] * n
    while True:
        least = np.where(met, np.minimum(label[:, pairs.i], label[:, pairs.j]), n)
        new = label.copy().reshape(-1)
        np.minimum.at(new, (flat + pairs.i).reshape(-1), least.reshape(-1))
        np.minimum.at(new, (flat + pairs.j).reshape(-1), least.reshape(-1))
        new = new.reshape(label.shape)
        if (new == label).all():
            break
        label = new
    where = (flat + label).reshape(-1)
    size = np.bincount(where, minlength=len(rows) * n).reshape(len(rows), n)
    mass = np.bincount(where, np.broadcast_to(weights, label.shape).reshape(-1), len(rows) * n).reshape(len(rows), n)
    mass[size < 2] = -1.0
    group = groups_of(pairs, weights)
    for g in np.unique(group):
        members = np.flatnonzero(group == g)
        if anchor is not None and anchor in members:
            main = label[:, anchor]
        else:
            main = members[np.argmax(mass[:, members], axis=1)]
        keep = (label[:, members] == main[:, None]) & (size[np.arange(len(rows)), main] >= 2)[:, None]
        out[np.ix_(rows, members)] = keep
    return out


def centred(
    samples: np.ndarray,
    held: np.ndarray,
    point: np.ndarray,
    groups: np.ndarray,
    weights: np.ndarray,
    anchor: int | None = None,
) -> np.ndarray:
    """Samples centred as `point` (the full data's centred fit), each on the models it holds; NaN where it holds none.

    In each group, a sample is shifted so that the weighted mean of the models it holds sits
    where `point` puts them (the anchor's group: so that the anchor does). A sample holding
    every model gets exactly the full data's centring.
    """
    out = np.where(held, samples, np.nan)
    for g in np.unique(groups):
        members = groups == g
        if anchor is not None and members[anchor]:
            shift = np.where(held[:, anchor], samples[:, anchor] - point[anchor], np.nan)
        else:
            w = held[:, members] * weights[members]
            mass = w.sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                shift = np.where(mass > 0, (w * (samples[:, members] - point[members])).sum(axis=1) / mass, np.nan)
        out[:, members] -= shift[:, None]
    return out


def intervals(samples: np.ndarray) -> dict[str, np.ndarray]:
    """Per model: the samples' median and 2.5% and 97.5% quantiles (FastChat's 95% interval), and how many hold it.

    NaN (a sample that does not hold the model) is left out; a model no sample holds gets NaN.
    """
    with warnings.catch_warnings():  # a model no sample holds: NaN, said by `held`
        warnings.simplefilter("ignore", RuntimeWarning)
        lower, median, upper = np.nanquantile(samples, [0.025, 0.5, 0.975], axis=0)
    return {"median": median, "lower": lower, "upper": upper, "held": np.isfinite(samples).sum(axis=0)}


def rank_by_interval(
    lower: np.ndarray, upper: np.ndarray, groups: np.ndarray | None = None, ranked: np.ndarray | None = None
) -> np.ndarray:
    """Chatbot Arena's rank: 1 + the models whose interval lies wholly above this one's.

    With `groups` (each model's), only the models of its own group count: ratings of models
    that never met, directly or through others, do not compare. With `ranked`, only those
    models count (a model of few battles changes no other's rank).
    """
    above = lower[None, :] > upper[:, None]
    if groups is not None:
        above &= groups[None, :] == groups[:, None]
    if ranked is not None:
        above &= ranked[None, :]
    return 1 + above.sum(axis=1)


def share_better(samples: np.ndarray) -> np.ndarray:
    """(n, n): the share of bootstrap samples rating model i above model j, of those holding both (NaN: none)."""
    finite = np.isfinite(samples)
    both = (finite[:, :, None] & finite[:, None, :]).sum(axis=0)
    above = (samples[:, :, None] > samples[:, None, :]).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(both > 0, above / np.maximum(both, 1), np.nan)
