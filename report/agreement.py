"""The Agreement section: how often annotators order the same two candidates the same way.

The same measures as `preflab stats` (`preflab.db.quality.agreement`): for every two
valid rankings of a prompt by different annotators, the candidate pairs both
order strictly, how many of those they order alike, and Kendall's tau-b on the
candidates both ranked; here also per annotator pair, for the heatmap.

Counting needs every two rankings of a prompt compared pair by pair, which no
`GROUP BY` does. The database streams (prompt, ranking, annotator, candidate,
tier) integers in prompt order; numpy compares a block of prompts at once and
keeps only sums per annotator pair, so memory stays flat in the store's size.
bench/README.md ("Report") has the numbers: on 100k rankings in SQLite the same
comparison as one SQL self-join of `ranking_items` took nearly 3× the CPU time,
and `stats`' Python loop (scipy's tau per ranking pair) over 30×.

A section is one criterion's (`Ranking.criterion`, `overall` unless asked): only rankings that
order by the same criterion are compared, as `stats` compares them.
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from preflab.db.models import OVERALL, Annotator, Prompt, Ranking, RankingItem, RankingStatus
from preflab.report.privacy import annotator_label, excerpt

CATEGORIES = ("all", "human-human", "human-ai", "ai-ai")
HEATMAP_ANNOTATORS = 24  # the most active annotators the heatmap shows (a larger grid is unreadable)
HOT_SPOTS = 5
BLOCK_ROWS = 100_000  # ranking items fetched and compared at a time
PROMPT, RANKING, ANNOTATOR, CANDIDATE, TIER = range(5)


@dataclass
class Tally:
    ranking_pairs: int = 0
    shared_pairs: int = 0
    agreeing_pairs: int = 0
    tau_sum: float = 0.0
    tau_count: int = 0

    def add(self, other: Tally) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self) -> dict[str, Any]:
        return {
            "ranking_pairs": self.ranking_pairs,
            "shared_pairs": self.shared_pairs,
            "pairwise_agreement": self.agreeing_pairs / self.shared_pairs if self.shared_pairs else None,
            "kendall_tau": self.tau_sum / self.tau_count if self.tau_count else None,
        }


def _category(first: str, second: str) -> str:
    kinds = {first, second}
    return "human-human" if kinds == {"human"} else "ai-ai" if kinds == {"ai"} else "human-ai"


def stream_rows(session: Session, query, rows: int) -> Iterator[list[tuple]]:
    """The query's rows, `rows` at a time, from the driver's own cursor in the session's transaction.

    Building SQLAlchemy rows cost more than the whole fetch here (bench/README.md,
    "Report"); the query holds only constants, so they are compiled into it.
    """
    connection = session.connection()
    sql = str(query.compile(dialect=connection.dialect, compile_kwargs={"literal_binds": True}))
    driver = connection.connection.dbapi_connection
    # A named cursor streams from the Postgres server; sqlite3's cursor streams by itself.
    cursor = driver.cursor(name="preflab_report") if connection.dialect.name == "postgresql" else driver.cursor()
    try:
        cursor.execute(sql)
        while batch := cursor.fetchmany(rows):
            yield batch
    finally:
        cursor.close()


def item_blocks(session: Session, rows: int = BLOCK_ROWS, criterion: str = OVERALL) -> Iterator[np.ndarray]:
    """Ranked items of valid rankings of `criterion` as int64 rows (prompt, ranking, annotator, candidate, tier).

    Blocks hold whole prompts: the rows of a prompt cut by a block's end move to the next block.
    """
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
    carry = np.empty((0, 5), dtype=np.int64)
    for part in stream_rows(session, query, rows):
        block = np.fromiter(itertools.chain.from_iterable(part), dtype=np.int64, count=5 * len(part)).reshape(-1, 5)
        block = np.concatenate([carry, block])
        cut = int(np.searchsorted(block[:, PROMPT], block[-1, PROMPT]))
        carry = block[cut:]
        if cut:
            yield block[:cut]
    if len(carry):
        yield carry


def _offset_pairs(
    groups: np.ndarray,
    keep: Callable[[int], np.ndarray] | None = None,
) -> Iterator[tuple[np.ndarray, int]]:
    """(indices i, offset k) of every two rows i < i + k in one group; `groups` must be sorted.

    Every two rows of a group of size g are (i, i + k) for one k < g, so a loop over
    k (the largest group's size, a handful here) finds them all with whole-array steps.
    `keep(k)` filters the pairs at offset k (a boolean array over rows 0 … len − k − 1).
    """
    k = 1
    while k < len(groups):
        same = groups[:-k] == groups[k:]
        if not same.any():
            return
        if keep is not None:
            same &= keep(k)
        yield np.flatnonzero(same), k
        k += 1


def _pair_key(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """One int64 per unordered annotator pair: low << 32 | high."""
    low, high = np.minimum(first, second), np.maximum(first, second)
    return (low << 32) | high


# Columns of the shared-candidate rows: two rankings of a prompt that both ranked one candidate.
R1, R2, CAND, T1, T2, A1, A2, PROMPT_ID = range(8)


def _count_ranking_pairs(items: np.ndarray, tallies: dict[int, Tally]) -> None:
    """Add the ranking pairs of each prompt by different annotators (even those sharing no candidate pair)."""
    items = items[np.lexsort((items[:, RANKING], items[:, PROMPT]))]
    first_row = np.ones(len(items), dtype=bool)
    first_row[1:] = items[1:, RANKING] != items[:-1, RANKING]
    prompts, annotators = items[first_row, PROMPT], items[first_row, ANNOTATOR]
    for i, k in _offset_pairs(prompts, lambda k: annotators[:-k] != annotators[k:]):
        keys, counts = np.unique(_pair_key(annotators[i], annotators[i + k]), return_counts=True)
        for key, n in zip(keys.tolist(), counts.tolist()):
            tallies[key].ranking_pairs += n


def _shared_candidates(items: np.ndarray) -> np.ndarray:
    """A row (R1, R2, CAND, T1, T2, A1, A2, PROMPT_ID) per candidate two annotators' rankings both ranked."""
    rows = items[np.lexsort((items[:, RANKING], items[:, CANDIDATE], items[:, PROMPT]))]
    group = rows[:, PROMPT] * (rows[:, CANDIDATE].max() + 1) + rows[:, CANDIDATE]
    annotators = rows[:, ANNOTATOR]
    parts = [
        np.column_stack(
            [
                rows[i, RANKING],
                rows[i + k, RANKING],
                rows[i, CANDIDATE],
                rows[i, TIER],
                rows[i + k, TIER],
                rows[i, ANNOTATOR],
                rows[i + k, ANNOTATOR],
                rows[i, PROMPT],
            ]
        )
        for i, k in _offset_pairs(group, lambda k: annotators[:-k] != annotators[k:])
    ]
    return np.concatenate(parts) if parts else np.empty((0, 8), dtype=np.int64)


def compare_block(items: np.ndarray) -> tuple[dict[int, Tally], np.ndarray, np.ndarray]:
    """Compare every two rankings of each prompt in a block of items.

    Returns:
        Tallies per annotator pair (`_pair_key`), and per ranking pair its prompt and
        (discordant, compared) candidate-pair counts.
    """
    tallies: dict[int, Tally] = defaultdict(Tally)
    _count_ranking_pairs(items, tallies)
    shared = _shared_candidates(items)
    if not len(shared):
        return tallies, np.empty(0, dtype=np.int64), np.empty((0, 2), dtype=np.int64)
    # Rows of one ranking pair together; each two of them is a candidate pair both ranked.
    shared = shared[np.lexsort((shared[:, CAND], shared[:, R2], shared[:, R1]))]
    start = np.ones(len(shared), dtype=bool)
    start[1:] = (shared[1:, R1] != shared[:-1, R1]) | (shared[1:, R2] != shared[:-1, R2])
    pair_id = np.cumsum(start) - 1
    n = int(pair_id[-1]) + 1
    concordant, discordant, compared, ties1, ties2 = (np.zeros(n, dtype=np.int64) for _ in range(5))
    for i, k in _offset_pairs(pair_id):
        d1, d2 = shared[i, T1] - shared[i + k, T1], shared[i, T2] - shared[i + k, T2]
        g = pair_id[i]
        concordant += np.bincount(g, d1 * d2 > 0, n).astype(np.int64)
        discordant += np.bincount(g, d1 * d2 < 0, n).astype(np.int64)
        compared += np.bincount(g, minlength=n)
        ties1 += np.bincount(g, d1 == 0, n).astype(np.int64)
        ties2 += np.bincount(g, d2 == 0, n).astype(np.int64)
    first = shared[start]
    # Kendall's tau-b; undefined (as scipy's NaN) where a ranking ties every shared candidate.
    denominator = (compared - ties1) * (compared - ties2)
    defined = denominator > 0
    tau = np.where(defined, (concordant - discordant) / np.sqrt(np.where(defined, denominator, 1)), 0.0)
    keys, inverse = np.unique(_pair_key(first[:, A1], first[:, A2]), return_inverse=True)
    sums = [np.bincount(inverse, values, len(keys)) for values in (concordant + discordant, concordant, tau, defined)]
    for j, key in enumerate(keys.tolist()):
        t = tallies[key]
        t.shared_pairs += int(sums[0][j])
        t.agreeing_pairs += int(sums[1][j])
        t.tau_sum += float(sums[2][j])
        t.tau_count += int(sums[3][j])
    return tallies, first[:, PROMPT_ID], np.column_stack([discordant, concordant + discordant])


def _annotators(session: Session, criterion: str = OVERALL) -> dict[int, dict[str, Any]]:
    """Every annotator's kind, public label and number of valid rankings of `criterion` (never a person's name)."""
    rankings = dict(
        session.execute(
            select(Ranking.annotator_id, func.count())
            .where(Ranking.status == RankingStatus.valid.value, Ranking.criterion == criterion)
            .group_by(Ranking.annotator_id)
        ).all()
    )
    out = {}
    for aid, kind, pseudonym, name in session.execute(
        select(Annotator.id, Annotator.kind, Annotator.pseudonym, Annotator.name)
    ):
        # People by pseudonym; an AI annotator by its name (`privacy.annotator_label`), which says its kind.
        label = annotator_label(kind, name, pseudonym)
        out[aid] = {"kind": kind, "label": label, "pseudonym": pseudonym, "rankings": rankings.get(aid, 0)}
    return out


def agreement_section(session: Session, no_text: bool = False, criterion: str = OVERALL) -> dict[str, Any]:
    """Agreement by category and by annotator pair, and the prompts annotators disagree on most, in `criterion`.

    No two annotators ranked one prompt: no categories and no heatmap (None); the
    annotator table is there wherever `preflab annotators` has people to measure.
    """
    by_pair: dict[int, Tally] = defaultdict(Tally)
    spots: list[tuple[float, int, int]] = []  # (disagreement, shared pairs, prompt): the worst HOT_SPOTS
    prompts_compared = 0
    quality = annotator_tally(session, criterion)
    for block in item_blocks(session, criterion=criterion):
        if quality is not None:  # the annotator table reads the same blocks: no second pass over the items
            quality.add(block)
        tallies, prompts, counts = compare_block(block)
        for key, tally in tallies.items():
            by_pair[key].add(tally)
        if len(prompts):
            ids, inverse = np.unique(prompts, return_inverse=True)
            dis, shared = (np.bincount(inverse, counts[:, c], len(ids)) for c in (0, 1))
            for pid, d, s in zip(ids.tolist(), dis.tolist(), shared.tolist()):
                if s >= 3 and d:
                    item = (d / s, int(s), pid)
                    (heapq.heappush if len(spots) < HOT_SPOTS else heapq.heappushpop)(spots, item)
        prompts_compared += _prompts_with_two_annotators(block)
    annotators = annotator_table(quality)
    if not by_pair:
        return {"categories": None, "heatmap": None, "hot_spots": [], "annotators": annotators}
    people = _annotators(session, criterion)
    categories = {name: Tally() for name in CATEGORIES}
    pairs = {}
    for key, tally in by_pair.items():
        first, second = key >> 32, key & 0xFFFFFFFF
        pairs[(first, second)] = tally
        categories["all"].add(tally)
        categories[_category(people[first]["kind"], people[second]["kind"])].add(tally)
    table = {name: tally.as_dict() for name, tally in categories.items()}
    table["all"]["prompts"] = prompts_compared
    return {
        "categories": table,
        "heatmap": heatmap(people, pairs),
        "hot_spots": [] if no_text else hot_spots(session, sorted(spots, reverse=True)),
        "annotators": annotators,
    }


def annotator_tally(session: Session, criterion: str = OVERALL):
    """A `QualityTally` of `criterion` to feed the item blocks to; None without gold answers or two people to
    measure."""
    from preflab.db.quality.annotators import QualityTally, quality_exists

    return QualityTally(session, criterion) if quality_exists(session, criterion) else None


def annotator_table(tally) -> dict[str, Any] | None:
    """`preflab annotators` with its default thresholds, by pseudonym (pseudonyms only)."""
    from dataclasses import asdict

    from preflab.db.quality.annotators import QualityConfig

    if tally is None or not tally.people:
        return None
    rows = [q.as_dict() for q in tally.result()]
    return {"rows": rows, "flagged": sum(bool(r["flags"]) for r in rows), "thresholds": asdict(QualityConfig())}


def _prompts_with_two_annotators(block: np.ndarray) -> int:
    """Prompts in the block ranked by two annotators or more."""
    rows = block[np.lexsort((block[:, ANNOTATOR], block[:, PROMPT]))]
    same_prompt = rows[1:, PROMPT] == rows[:-1, PROMPT]
    second = same_prompt & (rows[1:, ANNOTATOR] != rows[:-1, ANNOTATOR])
    return len(np.unique(rows[1:, PROMPT][second]))


def heatmap(people: dict[int, dict[str, Any]], by_pair: dict[tuple[int, int], Tally]) -> dict[str, Any] | None:
    """Pairwise agreement between the most active annotators who share compared rankings."""
    involved = {a for pair, t in by_pair.items() if t.shared_pairs for a in pair}
    if len(involved) < 2:
        return None
    # People first, then judges; the most active of each first.
    chosen = sorted(involved, key=lambda a: (people[a]["kind"] != "human", -people[a]["rankings"], a))
    shown = chosen[:HEATMAP_ANNOTATORS]
    index = {a: i for i, a in enumerate(shown)}
    size = len(shown)
    rate: list[list[float | None]] = [[None] * size for _ in range(size)]
    shared: list[list[int]] = [[0] * size for _ in range(size)]
    for (a, b), t in by_pair.items():
        if a in index and b in index and t.shared_pairs:
            i, j = index[a], index[b]
            rate[i][j] = rate[j][i] = t.agreeing_pairs / t.shared_pairs
            shared[i][j] = shared[j][i] = t.shared_pairs
    return {
        "labels": [people[a]["label"] for a in shown],
        "kinds": [people[a]["kind"] for a in shown],
        "rankings": [people[a]["rankings"] for a in shown],
        "agreement": rate,
        "shared_pairs": shared,
        "left_out": len(chosen) - len(shown),
    }


def hot_spots(session: Session, spots: list[tuple[float, int, int]]) -> list[dict[str, Any]]:
    """The prompts whose annotators disagree most (at least 3 shared pairs), with a prompt excerpt."""
    ids = [pid for _, _, pid in spots]
    texts = dict(session.execute(select(Prompt.id, func.substr(Prompt.text, 1, 200)).where(Prompt.id.in_(ids))).all())
    return [
        {"prompt_id": pid, "prompt": excerpt(texts.get(pid)), "disagreement": rate, "shared_pairs": shared}
        for rate, shared, pid in spots
    ]
