"""The reward-model bench, in the style of RewardBench: accuracy on held-out pairs, broken down.

Scored as RewardBench scores: a pair is right only when the chosen reply scores
strictly higher (a tie is wrong). Every accuracy carries a 95% interval from a
seeded bootstrap over prompts (`preflab.db.quality.intervals`). The breakdowns:

- per category (`pairs.prompt_categories`: the prompt's `source`, or the dataset it came from);
- per annotator kind (people's pairs, judges' pairs, pairs aggregated from both);
- per margin bucket (how far apart the ranking put the two replies: tiers, or a score gap);
- length bias: accuracy when the chosen reply is the shorter against when it is the longer
  (a model that prefers long replies is right on the second and wrong on the first);
- position, for a pair ranker (which reads both replies at once): accuracy when the chosen
  reply is shown first against shown second, and how often the order flips its verdict.
  A reward model scores each reply alone, so position cannot sway it.

`compare` scores two models on the same pairs and gives the paired difference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from preflab.db.quality.intervals import Resampler, paired_difference
from preflab.training.reward_eval.pairs import PairFacts
from preflab.training.reward_eval.score import Scored, reply_length

SCORING = "strict: a pair is right only when chosen scores above rejected (a tie is wrong), as RewardBench scores"
INTERVAL = "95% bootstrap interval, resampling prompts"


def _rows(resampler: Resampler, right: np.ndarray, groups: list[tuple[str, np.ndarray]]) -> list[dict[str, Any]]:
    cells = resampler.cells(right, [mask for _, mask in groups])
    return [{"group": name, **cell.as_dict()} for (name, _), cell in zip(groups, cells)]


def _by_value(values: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """One group per distinct value, the largest first (then by name)."""
    names, which, counts = np.unique(values.astype(str), return_inverse=True, return_counts=True)
    order = sorted(range(len(names)), key=lambda i: (-counts[i], names[i]))
    return [(str(names[i]), which.reshape(-1) == i) for i in order]


def margin_buckets(margins: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Groups of pairs by margin: by value (1, 2, 3+) when every margin is a whole number (tier gaps, or
    whole-number score gaps such as 1–5 ratings), else by terciles (those that hold a pair)."""
    known = ~np.isnan(margins)
    if not known.any():
        return []
    values = margins[known]
    if np.all(values == np.round(values)):
        out = [(f"{int(v)}", margins == v) for v in sorted(set(values.tolist())) if v < 3]
        if (values >= 3).any():
            out.append(("3+", margins >= 3))
        return out
    low, high = np.quantile(values, [1 / 3, 2 / 3])
    buckets = [
        (f"≤ {low:.3g}", margins <= low),
        (f"{low:.3g}–{high:.3g}", (margins > low) & (margins <= high)),
        (f"> {high:.3g}", margins > high),
    ]
    # Few distinct margins leave a bucket empty (or two cuts equal): no row for it, and no pair under a wrong label.
    return [(name, mask) for name, mask in buckets if mask.any()]


def lengths(split) -> tuple[np.ndarray, np.ndarray]:
    """(chosen, rejected) reply lengths in characters, per pair of a split with an explicit prompt."""
    return (
        np.array([reply_length(r) for r in split["chosen"]]),
        np.array([reply_length(r) for r in split["rejected"]]),
    )


def bench(scored: Scored, facts: PairFacts, split, rounds: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The bench's report for one model on the pairs of `split` (the form `score.score_split` returned).

    Args:
        facts: the pairs' prompts, categories, annotator kinds and margins, in the split's order.
        rounds: bootstrap rounds (0: no intervals).
    """
    resampler = Resampler(facts.prompt_ids, rounds, seed)
    right = scored.right
    chosen_length, rejected_length = lengths(split)
    shorter, longer = chosen_length < rejected_length, chosen_length > rejected_length
    [overall] = resampler.cells(right, [None])
    length_rows = _rows(resampler, right, [("chosen is shorter", shorter), ("chosen is longer", longer)])
    report: dict[str, Any] = {
        "model_version": scored.model_version,
        "scoring": SCORING,
        "interval": INTERVAL,
        "bootstrap": rounds,
        "seed": seed,
        "prompts": resampler.n_prompts,
        **overall.as_dict(),
        "ties": int((scored.gap == 0).sum()),
        "by_category": _rows(resampler, right, _by_value(facts.categories)),
        "by_annotator_kind": _rows(resampler, right, _by_value(facts.annotator_kinds)),
        "by_margin": _rows(resampler, right, margin_buckets(facts.margins)),
        "length_bias": {
            "rows": length_rows,
            "same_length": int((chosen_length == rejected_length).sum()),
            "gap": _gap(length_rows),
        },
        "position": _position(resampler, scored),
    }
    return report


def _gap(rows: list[dict[str, Any]]) -> float | None:
    """Accuracy when chosen is longer minus when it is shorter: > 0 means the model favours length."""
    shorter, longer = rows[0]["accuracy"], rows[1]["accuracy"]
    return None if shorter is None or longer is None else longer - shorter


def _position(resampler: Resampler, scored: Scored) -> dict[str, Any]:
    if scored.first is None:
        return {"applies": False, "why": "a reward model scores each reply alone: the order cannot sway it"}
    right_first, right_second = scored.first > 0, scored.second < 0
    [first] = resampler.cells(right_first, [None])
    [second] = resampler.cells(right_second, [None])
    # The order decided when each order's verdict picked the reply in the same place (first both times, or second).
    decided = (scored.first > 0) == (scored.second > 0)
    n = len(decided)
    return {
        "applies": True,
        "chosen_shown_first": first.as_dict(),
        "chosen_shown_second": second.as_dict(),
        "order_decides": float(decided.mean()) if n else None,
        "first_shown_wins": float(((scored.first > 0) & (scored.second > 0)).mean()) if n else None,
    }


def compare(this: Scored, other: Scored, facts: PairFacts, rounds: int = 1000, seed: int = 0) -> dict[str, Any]:
    """`this` against `other` on the same pairs: each accuracy, and the paired difference with its p-value."""
    resampler = Resampler(facts.prompt_ids, rounds, seed)
    mine, theirs = resampler.cells(this.right, [None])[0], resampler.cells(other.right, [None])[0]
    return {
        "model_version": this.model_version,
        "other": other.model_version,
        "pairs": len(this.gap),
        "prompts": resampler.n_prompts,
        "bootstrap": rounds,
        "seed": seed,
        "accuracy": mine.as_dict(),
        "other_accuracy": theirs.as_dict(),
        **paired_difference(resampler, this.right, other.right),
    }
