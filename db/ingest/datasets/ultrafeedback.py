"""openbmb/UltraFeedback: each instruction's completions ranked by GPT-4, once per criterion it rated.

A row holds an `instruction` and its `completions`, each with the `model` that wrote
it, its `response` and GPT-4's ratings: `overall_score`, `fine-grained_score`, and
per aspect (`helpfulness`, `honesty`, `instruction_following`, `truthfulness`) an
`annotations[aspect]` object whose `Rating` is a string ("4", or "N/A").

One import stores one ranking per row and criterion (`CRITERIA`): `overall` (by `overall_score`) and
each aspect (by its `Rating`); `fine_grained` (by `fine-grained_score`, the mean of the aspects) only
when `--criterion fine_grained` asks for it. `--criterion NAME` keeps that one alone. The completions
are ranked by the criterion's score field, best first; equal scores share a tier (a tie). The scores
are kept with the ranking, so a pair's margin is its score gap, and the field in its details
(`{"score_field": "honesty"}`: what a store written before criteria held, so migration 0014's
re-keyed rankings are these).

A completion that cannot be ranked does not lose its row. One whose `response` is empty is set
aside (`without_empty`) for every criterion, its part named `completion <i>`; one unrated by a
criterion's field (an "N/A" rating, a rating or score missing or null: `unrated`) is set aside for that
criterion alone (`set_aside_unrated`), its part named `completion <i>/<criterion>`: the import
quarantines each alone, and the row's other completions, two or more, are that criterion's ranking. A
criterion left with fewer than two, or holding a rating that is neither a number nor unrated ("five":
a broken rating, not a missing one), gives no ranking for the row, quarantined as a part named by the
criterion, and the row's other criteria are stored (`by_criteria`); the row is quarantined whole only
when no criterion gives a ranking.

The annotator is GPT-4, which scored them (the dataset card: "we use GPT-4 to provide ratings"), one AI
annotator for the dataset, `openbmb/UltraFeedback`; what it ranked by is the ranking's criterion.
"""

from __future__ import annotations

import math
from typing import Any

from preflab.db.ingest.datasets.base import Format, Replies, by_criteria, number, text, without_empty
from preflab.db.ingest.records import RankingRecord, shown
from preflab.db.models import OVERALL
from preflab.errors import Invalid

ANNOTATOR, KIND = "openbmb/UltraFeedback", "ai"
ASPECTS = ("helpfulness", "honesty", "instruction_following", "truthfulness")
FINE_GRAINED = "fine_grained"
# criterion -> the completion's score field it ranks by (an aspect is read from the completion's annotations)
FIELDS = {OVERALL: "overall_score", FINE_GRAINED: "fine-grained_score", **{a: a for a in ASPECTS}}
CRITERIA = (OVERALL, *ASPECTS)  # what one import stores; fine_grained only when asked for
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

    Raises Invalid for a score that is there but not a number.
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
        return None
    rating = aspect.get("Rating")
    return None if unrated(rating) else _rating(rating, field, index)


def _why(completion: dict[str, Any], field: str) -> str:
    """What an unrated completion holds in `field`, for a reason ("its honesty rating is 'N/A'")."""
    value = _found(completion, field)
    held = "missing" if value is None else shown(value)
    return f"'{field}' is {held}" if field in completion else f"its {field} rating is {held}"


def set_aside_unrated(
    completions: list[dict[str, Any]], kept: list[int], scores: list[float | None], criterion: str
) -> tuple[list[int], list[tuple[str, Any, str]]]:
    """Which of `kept` to rank (positions in it), and (name, completion, reason) of each unrated one set aside.

    As `without_empty` does with an empty completion: with two or more rated, each unrated one is set aside,
    for this criterion alone (its part is named with the criterion: another may rate it). With fewer,
    raises Invalid: the criterion gives no ranking for the row.
    """
    field = FIELDS[criterion]
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
            f"completion {i}/{criterion}",
            completions[i],
            f"completion {i} is unrated by {field} ({_why(completions[i], field)}), so the row's other "
            f"{len(rated)} replies were ranked by {field} without it",
        )
        for i in missing
    ]


def parse(row: dict[str, Any], criterion: str | None = None) -> list[RankingRecord]:
    """One ranking of the row's completions per criterion (`criterion`: that one alone); raises Invalid."""
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
    kept, empty = without_empty([c.get("response") for c in completions], names, completions)
    models = [c.get("model") if isinstance(c.get("model"), str) else None for c in completions]
    replies = Replies(instruction, [c.get("response") for c in completions], names, models)

    def by(criterion: str) -> RankingRecord:
        field = FIELDS[criterion]
        scores = [score(completions[i], field, i) for i in kept]
        rated, unrated_ones = set_aside_unrated(completions, kept, scores, criterion)
        ranked, values = [kept[j] for j in rated], [scores[j] for j in rated]
        tiers = [[i for i, s in enumerate(values) if s == value] for value in sorted(set(values), reverse=True)]
        record = replies.ranking(
            ranked, tiers, ANNOTATOR, kind=KIND, scores=values, details={"score_field": field}, criterion=criterion
        )
        record.set_aside = unrated_ones
        return record

    records = by_criteria(CRITERIA if criterion is None else (criterion,), by, row)
    records[0].set_aside[:0] = empty  # an empty completion is set aside once, whatever the criteria
    return records


EXAMPLE = (
    '{"source": "evol_instruct", "instruction": "Name a prime number.", "models": ["gpt-4", "alpaca-7b"], '
    '"completions": [{"model": "gpt-4", "response": "7 is prime.", "overall_score": 8.5, '
    '"fine-grained_score": 4.75, "annotations": {"helpfulness": {"Rating": "5", "Rationale": "Correct."}, '
    '"honesty": {"Rating": "5", "Rationale": "Confident."}, "instruction_following": {"Rating": "4", '
    '"Rationale": "Terse."}, "truthfulness": {"Rating": "5", "Rationale": "True."}}}, '
    '{"model": "alpaca-7b", "response": "9 is prime.", "overall_score": 3.0, "fine-grained_score": 1.5, '
    '"annotations": {"helpfulness": {"Rating": "1", "Rationale": "9 = 3 x 3."}, "honesty": {"Rating": "2", '
    '"Rationale": "Confidently wrong."}, "instruction_following": {"Rating": "2", "Rationale": "Not prime."}, '
    '"truthfulness": {"Rating": "1", "Rationale": "False."}}}]}'
)

FORMAT = Format(
    name="ultrafeedback",
    columns=frozenset({"instruction", "completions"}),
    parse=parse,
    options={"criterion": None},
    example=EXAMPLE,
    annotator=ANNOTATOR,
    kind=KIND,
    judged_by="GPT-4",
    texts=frozenset({"source", "instruction"}),
    criteria=CRITERIA,
    on_request=(FINE_GRAINED,),
)
