"""openbmb/UltraFeedback: one ranking of each instruction's completions, by GPT-4's scores.

A row holds an `instruction` and its `completions`, each with the `model` that wrote
it, its `response` and GPT-4's ratings: `overall_score`, `fine-grained_score`, and
per aspect (`helpfulness`, `honesty`, `instruction_following`, `truthfulness`) an
`annotations[aspect]` object whose `Rating` is a string ("4", or "N/A").

The completions are ranked by one score, best first; equal scores share a tier (a tie).
The score is the `score_field` option (`--score-field`, default `overall_score`): a
numeric field of the completion (`overall_score`, `fine-grained_score`) or an aspect
of its annotations, whose `Rating` is read (`helpfulness`, ...). The scores are kept
with the ranking, so a pair's margin is its score gap. A completion without a number
there (an "N/A" rating) quarantines the row: ranking the rest would silently drop it.
A completion whose `response` is empty is set aside instead (`without_empty`): the import
quarantines it alone, and the row's other completions, two or more, are its ranking.

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


def _rating(aspect: dict[str, Any], name: str) -> float:
    """An annotated aspect's `Rating`, a string in the dataset ("4", or "N/A"), as a number; raises Invalid."""
    rating = aspect.get("Rating")
    try:
        value = float(rating) if isinstance(rating, (str, int, float)) and not isinstance(rating, bool) else None
    except ValueError:
        value = None
    if value is None or not math.isfinite(value):
        raise Invalid(f"its {name} rating is {shown(rating)}, not a number")
    return value


def score(completion: dict[str, Any], field: str, index: int) -> float:
    """A completion's score in `field`: its own numeric field, or an annotated aspect's `Rating`; raises Invalid."""
    try:
        if field in completion:
            return number(completion, field)
        aspect = (completion.get("annotations") or {}).get(field)
        if not isinstance(aspect, dict):
            raise Invalid(
                f"no score {field!r} (a number of the completion, or an aspect of its annotations: "
                f"{', '.join(ASPECTS)})"
            )
        return _rating(aspect, field)
    except Invalid as exc:
        raise Invalid(f"completion {index}: {exc}") from None


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
    completions = [completions[i] for i in kept]
    scores = [score(c, score_field, i) for i, c in zip(kept, completions)]
    tiers = [[i for i, s in enumerate(scores) if s == value] for value in sorted(set(scores), reverse=True)]
    models = [c.get("model") if isinstance(c.get("model"), str) else None for c in completions]
    record = ranking(
        instruction,
        [c.get("response") for c in completions],
        tiers,
        ANNOTATOR.format(score_field),
        kind=KIND,
        models=models,
        scores=scores,
        details={"score_field": score_field},
        names=[names[i] for i in kept],
    )
    record.set_aside = set_aside
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
)
