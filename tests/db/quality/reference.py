"""Agreement statistics written again from their definitions, apart from preflab's code: the tests' reference.

Kendall's tau-b is scipy's (`kendalltau(variant="b")`); the rest is counted plainly,
one candidate pair at a time, and the Borda consensus in exact fractions. A ranking
is tiers of item ids, best first; an item in no tier is unranked. Nothing here
imports preflab.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import combinations

from scipy.stats import kendalltau

Tiers = Sequence[Sequence[int]]


def place(tiers: Tiers) -> dict[int, int]:
    """item -> its tier's index (0 is best)."""
    return {item: t for t, tier in enumerate(tiers) for item in tier}


def tau_b(first: dict, second: dict) -> float | None:
    """scipy's tau-b of two scorings (higher is better) on the items both score; None where it is undefined."""
    shared = sorted(first.keys() & second.keys())
    if len(shared) < 2:
        return None
    value = kendalltau([float(first[i]) for i in shared], [float(second[i]) for i in shared], variant="b").statistic
    return None if math.isnan(value) else float(value)


def pair_counts(first: dict, second: dict) -> tuple[int, int]:
    """(candidate pairs both score strictly apart, those they order alike), on the items both score."""
    shared = sorted(first.keys() & second.keys())
    strict = alike = 0
    for x, y in combinations(shared, 2):
        if first[x] != first[y] and second[x] != second[y]:
            strict += 1
            alike += (first[x] > first[y]) == (second[x] > second[y])
    return strict, alike


def scoring(tiers: Tiers) -> dict[int, int]:
    """A ranking as scores, higher is better (minus the tier's index)."""
    return {item: -t for item, t in place(tiers).items()}


@dataclass
class Tally:
    """Agreement over ranking pairs, as `stats` reports it: pooled pairwise agreement, mean tau-b."""

    ranking_pairs: int = 0
    shared_pairs: int = 0
    agreeing_pairs: int = 0
    taus: list[float] = field(default_factory=list)
    prompts: set = field(default_factory=set)

    def add(self, first: dict, second: dict, prompt=None) -> None:
        strict, alike = pair_counts(first, second)
        tau = tau_b(first, second)
        self.ranking_pairs += 1
        self.shared_pairs += strict
        self.agreeing_pairs += alike
        self.taus += [] if tau is None else [tau]
        self.prompts.add(prompt)

    @property
    def agreement(self) -> float | None:
        return self.agreeing_pairs / self.shared_pairs if self.shared_pairs else None

    @property
    def tau(self) -> float | None:
        return sum(self.taus) / len(self.taus) if self.taus else None


def borda(rankings: Iterable[Tiers]) -> dict[int, Fraction]:
    """Each item's mean normalised Borda score, exactly, over the rankings of two or more items that rank it.

    In a ranking of m items an item scores the items strictly below it plus half of
    those tied with it, over m − 1.
    """
    totals: dict[int, list[Fraction]] = {}
    for tiers in rankings:
        where = place(tiers)
        m = len(where)
        if m < 2:
            continue
        for item, t in where.items():
            below = sum(u > t for u in where.values())
            tied = sum(u == t for u in where.values()) - 1
            totals.setdefault(item, []).append(Fraction(2 * below + tied, 2 * (m - 1)))
    return {item: sum(scores) / len(scores) for item, scores in totals.items()}


def pearson(points: Sequence[tuple[float, float]]) -> float | None:
    """scipy's Pearson correlation; None under three points or where a side does not vary."""
    from scipy.stats import pearsonr

    xs, ys = zip(*points) if points else ((), ())
    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    return float(pearsonr(xs, ys).statistic)
