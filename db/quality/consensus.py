"""Each ranking against a reference, a block of whole prompts at a time, in numpy.

`preflab annotators` compares every person's ranking with the Borda consensus of
the other people on the same prompt (leave-one-out) and with the gold answer. In
Python (`borda` and `compare_rankings` per ranking) that cost 7 s of CPU on
100,000 rankings, more than the report's whole Agreement section; here each step
is a whole-array operation on the block's rows, and the numbers are the same
(tests/db/quality/test_quality.py checks them against those two functions).

Rows are int64 (prompt, ranking, annotator, candidate, tier), a block holding
whole prompts, as `item_blocks` streams them, of one criterion: a consensus is of
rankings that order by the same criterion.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from preflab.db.models import OVERALL, Annotator, Ranking, RankingItem, RankingStatus

PROMPT, RANKING, ANNOTATOR, CANDIDATE, TIER = range(5)
TIE = 1e-6  # consensus scores this close are a tie (as `tiers_from_scores` is told)
BLOCK_ROWS = 100_000


def item_blocks(
    session: Session, kind: str | None = None, rows: int = BLOCK_ROWS, criterion: str = OVERALL
) -> Iterator[np.ndarray]:
    """Ranked items of valid rankings of `criterion` (by annotators of `kind`) as int64 rows, in blocks of whole
    prompts."""
    query = (
        select(Ranking.prompt_id, Ranking.id, Ranking.annotator_id, RankingItem.candidate_id, RankingItem.tier)
        .join(RankingItem, RankingItem.ranking_id == Ranking.id)
        .where(
            Ranking.status == RankingStatus.valid.value,
            Ranking.criterion == criterion,
            RankingItem.tier.is_not(None),
        )
        .order_by(Ranking.prompt_id)
    )
    if kind is not None:
        query = query.join(Annotator, Annotator.id == Ranking.annotator_id).where(Annotator.kind == kind)
    carry = np.empty((0, 5), dtype=np.int64)
    for part in session.execute(query.execution_options(yield_per=rows)).partitions():
        block = np.fromiter(itertools.chain.from_iterable(part), dtype=np.int64, count=5 * len(part)).reshape(-1, 5)
        block = np.concatenate([carry, block])
        cut = int(np.searchsorted(block[:, PROMPT], block[-1, PROMPT]))  # the last prompt may go on
        carry = block[cut:]
        if cut:
            yield block[:cut]
    if len(carry):
        yield carry


def by_ranking(rows: np.ndarray) -> np.ndarray:
    """The rows sorted by ranking, then tier (best first), then candidate."""
    return rows[np.lexsort((rows[:, CANDIDATE], rows[:, TIER], rows[:, RANKING]))]


def borda_scores(rows: np.ndarray) -> np.ndarray:
    """Each row's normalised Borda score in its ranking (as `preflab.db.pairs.build.borda`); NaN in a ranking of one.

    A candidate scores the candidates strictly below it plus half of those tied
    with it, over m − 1 for a ranking of m. `rows` must be sorted `by_ranking`.
    """
    r, t = rows[:, RANKING], rows[:, TIER]
    new_ranking = np.r_[True, r[1:] != r[:-1]]
    new_tier = new_ranking | np.r_[True, t[1:] != t[:-1]]
    tier_id = np.cumsum(new_tier) - 1
    tier_size = np.bincount(tier_id)
    ranking_id = np.cumsum(new_ranking) - 1
    m = np.bincount(ranking_id)[ranking_id]
    start = np.flatnonzero(new_ranking)[ranking_id]
    below = m - (np.cumsum(tier_size)[tier_id] - start)
    score = (below + 0.5 * (tier_size[tier_id] - 1)) / np.maximum(m - 1, 1)
    return np.where(m > 1, score, np.nan)


def leave_one_out(rows: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Each row's candidate's mean Borda score in the other annotators' rankings of its prompt (NaN: none)."""
    ranked = ~np.isnan(scores)
    score, count = np.where(ranked, scores, 0.0), ranked.astype(np.float64)
    _, item = np.unique((rows[:, PROMPT] << 32) | rows[:, CANDIDATE], return_inverse=True)
    _, annotator = np.unique(rows[:, ANNOTATOR], return_inverse=True)
    _, own = np.unique(item.astype(np.int64) * (annotator.max() + 1) + annotator, return_inverse=True)
    others = np.bincount(item, count)[item] - np.bincount(own, count)[own]
    total = np.bincount(item, score)[item] - np.bincount(own, score)[own]
    return np.where(others > 0, total / np.maximum(others, 1), np.nan)


@dataclass
class Compared:
    """Per ranking of a block: its annotator, pairs both order strictly, those ordered alike, tau-b (NaN: none)."""

    ranking: np.ndarray
    prompt: np.ndarray
    annotator: np.ndarray
    strict: np.ndarray
    agreeing: np.ndarray
    tau: np.ndarray


def against(rows: np.ndarray, reference: np.ndarray) -> Compared:
    """Each ranking compared (as `compare_rankings`) with a reference score per row: higher is better, NaN unranked.

    `rows` must be sorted `by_ranking`; every two of a ranking's rows are a
    candidate pair (pairs i < i + k, one whole-array step per offset k).
    """
    r, t = rows[:, RANKING], rows[:, TIER]
    first = np.r_[True, r[1:] != r[:-1]]
    ranking_id = np.cumsum(first) - 1
    n = int(first.sum())
    counts = {name: np.zeros(n) for name in ("concordant", "discordant", "tied_first", "tied_second")}
    k = 1
    while k < len(rows):
        i = np.flatnonzero(r[:-k] == r[k:])
        if not len(i):
            break
        both = ~np.isnan(reference[i]) & ~np.isnan(reference[i + k])  # candidates both rank
        i = i[both]
        j = i + k
        strict_first = t[i] != t[j]  # sorted by tier: i is ranked above j, or tied with it
        gap = reference[i] - reference[j]
        strict_second = np.abs(gap) > TIE
        for name, hit in (
            ("concordant", strict_first & strict_second & (gap > 0)),
            ("discordant", strict_first & strict_second & (gap < 0)),
            ("tied_first", ~strict_first & strict_second),
            ("tied_second", strict_first & ~strict_second),
        ):
            counts[name] += np.bincount(ranking_id[i], hit, n)
        k += 1
    strict = counts["concordant"] + counts["discordant"]
    denominator = (strict + counts["tied_first"]) * (strict + counts["tied_second"])
    tau = np.where(
        denominator > 0,
        (counts["concordant"] - counts["discordant"]) / np.sqrt(np.where(denominator > 0, denominator, 1)),
        np.nan,
    )
    return Compared(r[first], rows[first, PROMPT], rows[first, ANNOTATOR], strict, counts["concordant"], tau)


def gold_reference(rows: np.ndarray, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each row's gold score (minus its gold tier; NaN where gold does not rank it).

    `keys` (prompt << 32 | candidate, sorted) and `values` hold the gold scores.
    """
    if not len(keys):
        return np.full(len(rows), np.nan)
    wanted = (rows[:, PROMPT] << 32) | rows[:, CANDIDATE]
    at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    return np.where(keys[at] == wanted, values[at], np.nan)


def multi_annotator_prompts(rows: np.ndarray) -> np.ndarray:
    """The prompts of the block that two annotators or more ranked."""
    pairs = np.unique((rows[:, PROMPT] << 32) | rows[:, ANNOTATOR]) >> 32
    prompts, counts = np.unique(pairs, return_counts=True)
    return prompts[counts > 1]
