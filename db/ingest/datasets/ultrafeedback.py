"""openbmb/UltraFeedback: one ranking of each instruction's completions, by GPT-4's scores.

A row holds an `instruction` and its `completions`, each with the `model` that wrote
it, its `response` and GPT-4's ratings: `overall_score`, `fine-grained_score`, and
per aspect (`helpfulness`, `honesty`, `instruction_following`, `truthfulness`) an
`annotations[aspect]` object whose `Rating` is a string ("4", or "N/A").

The completions are ranked by one score, best first; equal scores share a tier (a tie).
The score is the `score_field` option (`--score-field`, default `overall_score`): a
numeric field of the completion (`overall_score`, `fine-grained_score`) or an aspect
of its annotations, whose `Rating` is read (`helpfulness`, ...). The scores are kept
with the ranking, so a pair's margin is its score gap.

A completion that cannot be ranked does not lose its row. One whose `response` is empty is set
aside (`without_empty`), and so is one unrated in the score field (an "N/A" rating, a rating or
score missing or null: `unrated`), for that score field only (`set_aside_unrated`): the import
quarantines each alone, its part of the row named `completion <i>` (empty) or `completion
<i>/<score field>` (unrated), and the row's other completions, two or more, are its ranking. With
fewer than two left, the row is quarantined whole, naming why. A rating that is neither a number nor
unrated ("five") quarantines the row: it is a broken row, not a missing rating.

The annotator is GPT-4, which scored them (the dataset card: "we use GPT-4 to provide
ratings"), an AI annotator named for the field ranked by ("openbmb/UltraFeedback:overall_score"),
so rankings by another field are other rankings rather than duplicates of the first.
"""

from __future__ import annotations

import math
from typing import Any

from preflab.db.ingest.datasets.base import Format, number, ranking, text, without_empty
from preflab.db.ingest.records import RankingRecord, shown
from preflab.errors import Invalid

ANNOTATOR, KIND = "openbmb/UltraFeedback:{}", "ai"
ASPECTS = ("helpfulness", "honesty", "instruction_following", "truthfulness")
DEFAULT_FIELD = "overall_score"
# The score fields every completion of the dataset has: one missing there is unrated, not a typo.
KNOWN = ("overall_score", "fine-grained_score", *ASPECTS)
NOT_RATED = "N/A"  # the dataset's rating where GPT-4 gave none


def unrated(value: Any) -> bool:
    """Whether a score or rating says nothing: "N/A", null or missing (None), or NaN (pandas' missing number)."""
    if isinstance(value, str):
        return value.strip().upper() == NOT_RATED
    return value is None or (isinstance(value, float) and math.isnan(value))


def _rating(rating: Any, field: str, index: int) -> float:
    """An aspect's `Rating`, a string in the dataset ("4"), as a number; raises Invalid."""
    try:
        value = float(rating) if isinstance(rating, (str, int, float)) and not isinstance(rating, bool) else None
    except ValueError:
        value = None
    if value is None or not math.isfinite(value):
        raise Invalid(f"completion {index}: its {field} rating is {shown(rating)}, not a number")
    return value


def _found(completion: dict[str, Any], field: str) -> Any:
    """What a completion holds in `field`: its own field's value, else its annotated aspect's `Rating` (None: none)."""
    if field in completion:
        return completion[field]
    annotations = completion.get("annotations")
    aspect = annotations.get(field) if isinstance(annotations, dict) else None
    return aspect.get("Rating") if isinstance(aspect, dict) else None


def score(completion: dict[str, Any], field: str, index: int) -> float | None:
    """A completion's score in `field` (its own numeric field, or an annotated aspect's `Rating`); None: unrated.

    Raises Invalid for a score that is there but not a number, or a field no completion of the dataset has.
    """
    if field in completion:
        value = completion[field]
        try:
            return None if unrated(value) else number(completion, field)
        except Invalid as exc:
            raise Invalid(f"completion {index}: {exc}") from None
    annotations = completion.get("annotations")
    aspect = annotations.get(field) if isinstance(annotations, dict) else None
    if not isinstance(aspect, dict):
        if field in KNOWN:
            return None
        raise Invalid(
            f"completion {index}: no score {field!r} (a number of the completion, or an aspect of its "
            f"annotations: {', '.join(ASPECTS)})"
        )
    rating = aspect.get("Rating")
    return None if unrated(rating) else _rating(rating, field, index)


def _why(completion: dict[str, Any], field: str) -> str:
    """What an unrated completion holds in `field`, for a reason ("its honesty rating is 'N/A'")."""
    value = _found(completion, field)
    held = "missing" if value is None else shown(value)
    return f"'{field}' is {held}" if field in completion else f"its {field} rating is {held}"


def set_aside_unrated(
    completions: list[dict[str, Any]], kept: list[int], scores: list[float | None], field: str
) -> tuple[list[int], list[tuple[str, Any, str]]]:
    """Which of `kept` to rank (positions in it), and (name, completion, reason) of each unrated one set aside.

    As `without_empty` does with an empty completion: with two or more rated, each unrated one is set aside,
    for this score field alone (its part is named with the field: another field may rate it). With fewer,
    raises Invalid: the row is quarantined whole.
    """
    rated = [j for j, s in enumerate(scores) if s is not None]
    missing = [kept[j] for j, s in enumerate(scores) if s is None]
    if missing and len(rated) < 2:
        first = missing[0]
        which = "" if len(kept) == len(completions) else "non-empty "
        raise Invalid(
            f"{'only 1' if rated else 'none'} of its {len(kept)} {which}completions is rated by {field} "
            f"(completion {first}: {_why(completions[first], field)})"
        )
    return rated, [
        (
            f"completion {i}/{field}",
            completions[i],
            f"completion {i} is unrated by {field} ({_why(completions[i], field)}), so the row's other "
            f"{len(rated)} replies were ranked by {field} without it",
        )
        for i in missing
    ]


def parse(row: dict[str, Any], score_field: str = DEFAULT_FIELD) -> list[RankingRecord]:
    """One ranking of the row's completions by `score_field` (`--score-field`); raises Invalid."""
    completions = row.get("completions")
    if not isinstance(completions, list):
        raise Invalid("missing 'completions' (a list of the models' completions)")
    if len(completions) < 2:
        raise Invalid(f"fewer than two completions ({len(completions)})")
    for i, completion in enumerate(completions):
        if not isinstance(completion, dict):
            raise Invalid(f"completion {i} is {type(completion).__name__}, not an object")
    instruction = text(row, "instruction")
    names = [f"completion {i}" for i in range(len(completions))]
    kept, set_aside = without_empty([c.get("response") for c in completions], names, completions)
    scores = [score(completions[i], score_field, i) for i in kept]
    rated, unrated_ones = set_aside_unrated(completions, kept, scores, score_field)
    kept, scores = [kept[j] for j in rated], [scores[j] for j in rated]
    tiers = [[i for i, s in enumerate(scores) if s == value] for value in sorted(set(scores), reverse=True)]
    models = [completions[i].get("model") if isinstance(completions[i].get("model"), str) else None for i in kept]
    record = ranking(
        instruction,
        [completions[i].get("response") for i in kept],
        tiers,
        ANNOTATOR.format(score_field),
        kind=KIND,
        models=models,
        scores=scores,
        details={"score_field": score_field},
        names=[names[i] for i in kept],
    )
    record.set_aside = set_aside + unrated_ones
    return [record]


EXAMPLE = (
    '{"source": "evol_instruct", "instruction": "Name a prime number.", "models": ["gpt-4", "alpaca-7b"], '
    '"completions": [{"model": "gpt-4", "response": "7 is prime.", "overall_score": 8.5, '
    '"fine-grained_score": 4.75, "annotations": {"helpfulness": {"Rating": "5", "Rationale": "Correct."}}}, '
    '{"model": "alpaca-7b", "response": "9 is prime.", "overall_score": 3.0, "fine-grained_score": 1.5, '
    '"annotations": {"helpfulness": {"Rating": "1", "Rationale": "9 = 3 x 3."}}}]}'
)

FORMAT = Format(
    name="ultrafeedback",
    columns=frozenset({"instruction", "completions"}),
    parse=parse,
    options={"score_field": DEFAULT_FIELD},
    example=EXAMPLE,
    annotator=ANNOTATOR.format("<score field>"),
    kind=KIND,
    judged_by="GPT-4",
    texts=frozenset({"source", "instruction"}),
)
