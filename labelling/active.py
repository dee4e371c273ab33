"""Active selection: which prompts people should rank next.

Four strategies, each returning the chosen prompts with a score and the reason:

- `random`: a seeded sample (every prompt equally likely).
- `disagreement`: the AI judges (and, given one, the reward model) rank the
  prompt's candidates most differently: 1 − mean Kendall tau-b over every pair
  of rankings, halved, so 0 is full agreement and 1 is reversed orders. Two
  rankings are compared only when they order by the same criterion; a prompt
  ranked by several criteria scores as its most disputed one (the prompt is
  what people are given to rank).
- `uncertainty`: with one reward model, its score gaps between the candidates are
  smallest (the mean Bradley–Terry entropy of the candidate pairs, in bits); with
  an ensemble, the members' score gaps vary most (their mean standard deviation).
- `diversity`: a greedy D-optimal pick on the reward model's last-layer features.
  A ranking of candidates with features φ teaches a Bradley–Terry head about the
  pair differences φᵢ − φⱼ, weighted by p(1 − p) (the head's Fisher information);
  each pick adds the most log-determinant to the information gathered so far, so
  the batch spreads over directions the labelled data has not covered.

The pickers (`pick_*`) work on plain numbers, so a simulation can drive them
(`bench/bench_active.py`); `active_store.select_prompts` gathers those numbers from
the store and the reward model(s) for `preflab ls push --select`.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from preflab.db.models import OVERALL
from preflab.db.pairs.build import tiers_from_scores
from preflab.db.quality.agreement import compare_rankings
from preflab.errors import ConfigError

STRATEGIES = ("random", "disagreement", "uncertainty", "diversity")
NEEDS_REWARD_MODEL = ("uncertainty", "diversity")
Tiers = list[list[int]]


@dataclass(frozen=True)
class Choice:
    """One chosen prompt: its score under the strategy (higher: more worth ranking) and why."""

    prompt_id: int
    score: float
    reason: str

    def record(self, strategy: str) -> dict:
        """What `ls_tasks.selection` stores for the task made from this prompt."""
        return {"strategy": strategy, "score": round(self.score, 6), "reason": self.reason}


@dataclass
class SelectConfig:
    """How `ls push --select` chooses the prompts people rank next."""

    select: str | None = field(
        default=None,
        metadata={
            "help": "Choose the prompts to push by a strategy (with --limit K: the K best): random, disagreement "
            "(AI judges rank most differently), uncertainty (reward-model score gaps smallest, or an "
            "ensemble varies most), diversity (greedy D-optimal on the reward model's last-layer features).",
            "choices": STRATEGIES,
        },
    )
    reward_model: str | None = field(
        default=None,
        metadata={
            "help": "Reward model for --select uncertainty/diversity (and a voice in disagreement): a model version, "
            "path or hub id; several, comma-separated, make an ensemble."
        },
    )
    select_batch_size: int = field(default=8, metadata={"help": "Responses the reward model scores per forward pass."})

    def __post_init__(self) -> None:
        if self.select is not None and self.select not in STRATEGIES:
            raise ConfigError(f"--select must be one of {', '.join(STRATEGIES)}, got {self.select!r}")
        if self.select in NEEDS_REWARD_MODEL and not self.reward_models:
            raise ConfigError(f"--select {self.select} needs --reward-model")
        if self.select == "diversity" and len(self.reward_models) > 1:
            raise ConfigError("--select diversity takes one --reward-model (its last-layer features)")
        if self.select_batch_size < 1:
            raise ConfigError("--select-batch-size must be at least 1")

    @property
    def reward_models(self) -> list[str]:
        return [name.strip() for name in (self.reward_model or "").split(",") if name.strip()]


def _top(scored: list[Choice], k: int) -> list[Choice]:
    # Ties go to the lower prompt id, so a selection is reproducible.
    return sorted(scored, key=lambda c: (-c.score, c.prompt_id))[:k]


def pick_random(prompt_ids: Sequence[int], k: int, seed: int = 0) -> list[Choice]:
    """K prompts drawn uniformly without replacement, seeded."""
    chosen = random.Random(seed).sample(sorted(prompt_ids), min(k, len(prompt_ids)))
    return [Choice(pid, 1.0 / len(prompt_ids), f"random draw (seed {seed})") for pid in chosen]


def disagreement(views: Sequence[Tiers]) -> tuple[float, float] | None:
    """(score, mean Kendall tau-b) of one criterion's rankings of a prompt: (1 − mean tau-b) / 2 over every two.

    None where no two rankings share two ranked candidates.
    """
    taus = [tau for a, b in combinations(views, 2) if (tau := compare_rankings(a, b)[2]) is not None]
    if not taus:
        return None
    mean = sum(taus) / len(taus)
    return (1 - mean) / 2, mean


def pick_disagreement(rankings: Mapping[int, Sequence[Tiers] | Mapping[str, Sequence[Tiers]]], k: int) -> list[Choice]:
    """The K prompts whose rankings (tiers of candidate ids, best first) disagree most.

    A prompt's rankings are one list (one criterion), or a list per criterion: rankings are compared within
    their criterion only, and the prompt scores as its most disputed criterion (the first by name on a tie).
    Prompts with fewer than two rankings of one criterion that share two ranked candidates have no score and
    are not chosen.
    """
    scored = []
    for pid, views in rankings.items():
        by_criterion = views if isinstance(views, Mapping) else {OVERALL: views}
        best = None
        for name in sorted(by_criterion):
            found = disagreement(by_criterion[name])
            if found is not None and (best is None or found[0] > best[0]):
                best = (*found, name)
        if best is not None:
            score, mean, name = best
            of = "" if name == OVERALL else f" of {name}"
            n = len(by_criterion[name])
            scored.append(Choice(pid, score, f"{n} rankings{of} agree at mean Kendall tau-b {mean:.3f}"))
    return _top(scored, k)


def ranking_from_scores(candidate_ids: Sequence[int], scores: Sequence[float]) -> Tiers:
    """Tiers, best first, from a scorer's scores (exactly equal scores share a tier)."""
    return tiers_from_scores(dict(zip(candidate_ids, scores)), tolerance=0.0)


def _entropy_bits(gap: float) -> float:
    p = 1.0 / (1.0 + math.exp(-abs(gap)))
    return 0.0 if p >= 1.0 else -(p * math.log2(p) + (1 - p) * math.log2(1 - p))


def uncertainty_score(members: Sequence[Sequence[float]]) -> tuple[float, str]:
    """(score, reason) of one prompt from its candidates' scores by each ensemble member."""
    n = len(members[0])
    pairs = list(combinations(range(n), 2))
    if len(members) == 1:
        gaps = [abs(members[0][i] - members[0][j]) for i, j in pairs]
        score = sum(map(_entropy_bits, gaps)) / len(pairs)
        return score, f"reward-model score gaps as small as {min(gaps):.4f} (mean pair entropy {score:.3f} bits)"
    spreads = []
    for i, j in pairs:
        diffs = [m[i] - m[j] for m in members]
        mean = sum(diffs) / len(diffs)
        spreads.append(math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)))
    score = sum(spreads) / len(spreads)
    return score, f"{len(members)} reward models' score gaps vary by {score:.4f} (mean std over candidate pairs)"


def pick_uncertainty(scores: Mapping[int, Sequence[Sequence[float]]], k: int) -> list[Choice]:
    """The K prompts the reward model (or ensemble) is least sure how to order.

    Args:
        scores: prompt id -> one list per ensemble member of its candidates' scores.
    """
    scored = []
    for pid, members in scores.items():
        if len(members[0]) >= 2:
            scored.append(Choice(pid, *uncertainty_score(members)))
    return _top(scored, k)


def _pair_rows(features, scores):
    """Pair differences √w·(φᵢ − φⱼ) of one prompt, w = p(1 − p) under the scores (1 without)."""
    import numpy as np

    rows = []
    for i, j in combinations(range(len(features)), 2):
        w = 1.0
        if scores is not None:
            p = 1.0 / (1.0 + math.exp(-abs(scores[i] - scores[j])))
            w = p * (1 - p)
        rows.append(math.sqrt(w) * (features[i] - features[j]))
    return np.asarray(rows, dtype=np.float64)


def pick_diversity(
    features: Mapping[int, object],
    k: int,
    *,
    scores: Mapping[int, Sequence[float]] | None = None,
    labelled: Mapping[int, object] | None = None,
    ridge: float = 1.0,
    max_dim: int = 64,
) -> list[Choice]:
    """Greedy D-optimal: K prompts that add most to log det of the last-layer information.

    Args:
        features: prompt id -> its candidates' last-layer features (n × d).
        scores: prompt id -> its candidates' reward-model scores; weights each pair by p(1 − p).
        labelled: prompt id -> features of a prompt already ranked: the information the batch starts from.
        ridge: the prior information (ridge · I) before anything is ranked.
        max_dim: wider features are projected on their top principal pair directions first.
    """
    import numpy as np

    def pair_rows(pid, table):
        return _pair_rows(np.asarray(table[pid], dtype=np.float64), None if scores is None else scores[pid])

    ids = [pid for pid in features if len(features[pid]) >= 2]
    rows = {pid: pair_rows(pid, features) for pid in ids}
    known = [pair_rows(pid, labelled) for pid in (labelled or {}) if len(labelled[pid]) >= 2]
    if not ids:
        return []
    width = next(iter(rows.values())).shape[1]
    if width > max_dim:  # log det in a few hundred dimensions is slow and mostly noise
        stacked = np.concatenate(list(rows.values()) + known)
        basis = np.linalg.svd(stacked[:: max(1, len(stacked) // 20000)], full_matrices=False)[2][:max_dim].T
        rows = {pid: r @ basis for pid, r in rows.items()}
        known = [r @ basis for r in known]
        width = max_dim
    info = ridge * np.eye(width) + sum((r.T @ r for r in known), np.zeros((width, width)))

    def gain(pid: int, inverse) -> float:
        r = rows[pid]
        return float(np.linalg.slogdet(np.eye(len(r)) + r @ inverse @ r.T)[1])

    inverse = np.linalg.inv(info)
    # Log det is submodular, so a gain only shrinks as picks are made: the lazy greedy
    # re-scores only the head of the queue, with the same picks as the plain greedy.
    queue = [(-gain(pid, inverse), pid) for pid in ids]
    heapq.heapify(queue)
    chosen: list[Choice] = []
    fresh = set(ids)
    while queue and len(chosen) < k:
        stale, pid = heapq.heappop(queue)
        if pid not in fresh:
            heapq.heappush(queue, (-gain(pid, inverse), pid))
            fresh.add(pid)
            continue
        value = -stale
        chosen.append(
            Choice(
                pid,
                value,
                f"adds {value:.4f} nats to log det of the reward model's "
                f"last-layer information (pick {len(chosen) + 1})",
            )
        )
        info = info + rows[pid].T @ rows[pid]
        inverse = np.linalg.inv(info)
        fresh = set()
    return chosen
