"""Anthropic/hh-rlhf: `chosen` and `rejected`, two whole transcripts, and the HH transcript parser.

A transcript is turns headed `\\n\\nHuman:` and `\\n\\nAssistant:` (`transcript_messages`; nectar's
prompts are written the same way). The two transcripts of a row share their turns up to the last
assistant turn: those are the prompt, and what follows in each is its reply (`split_shared`).
chosen > rejected, by the crowdworker who chose (people, as the dataset card says; one human annotator,
`hh-rlhf`, for the whole dataset: the rows do not say which crowdworker).
Identical sides, or text with no turns, are quarantined.

What the crowdworker chose by depends on the subset a file comes from, which its rows do not say: the
card's helpfulness data (`helpful-base`, `helpful-online`, `helpful-rejection-sampled`: the more helpful
reply) or harmlessness data (`harmless-base`: the less harmful one). `--criterion helpfulness` or
`harmlessness` names it; without it, a source whose file or folder name starts with `helpful-` or
`harmless-` is taken to be that subset (`Format.subsets`, and the import's summary says what it
assumed), and any other source (the Hub's `Anthropic/hh-rlhf`, all subsets mixed) is `overall`.
"""

from __future__ import annotations

import re
from typing import Any

from preflab.db.conversation import Messages
from preflab.db.ingest.datasets.base import Format, ranking, split_shared, text
from preflab.db.ingest.records import RankingRecord
from preflab.db.models import OVERALL
from preflab.errors import Invalid

ANNOTATOR = "hh-rlhf"
_TURN = re.compile(r"(?:^|\n\n)(Human|Assistant):[ \t]?")
_ROLES = {"Human": "user", "Assistant": "assistant"}


def transcript_messages(value: str, where: str, keep_empty_last: bool = False) -> Messages:
    """An HH transcript ("\\n\\nHuman: …\\n\\nAssistant: …") as messages, contents stripped.

    A last assistant turn left empty (a prompt waiting for its answer, as nectar writes them) is
    dropped unless `keep_empty_last`. Raises Invalid when the text holds no turn, or text before its first.
    """
    marks = list(_TURN.finditer(value))
    if not marks:
        raise Invalid(f"{where} holds no turns (no '\\n\\nHuman:' or '\\n\\nAssistant:')")
    if value[: marks[0].start()].strip():
        raise Invalid(f"{where} has text before its first turn")
    turns = []
    for mark, following in zip(marks, [*marks[1:], None]):
        content = value[mark.end() : following.start() if following else len(value)].strip()
        turns.append({"role": _ROLES[mark.group(1)], "content": content})
    if not keep_empty_last and turns[-1]["role"] == "assistant" and not turns[-1]["content"]:
        turns.pop()
    return turns


def parse(row: dict[str, Any], criterion: str | None = None) -> list[RankingRecord]:
    """chosen > rejected, by `criterion` (the subset the row comes from; None: overall); raises Invalid."""
    chosen = transcript_messages(text(row, "chosen"), "'chosen'", keep_empty_last=True)
    rejected = transcript_messages(text(row, "rejected"), "'rejected'", keep_empty_last=True)
    prompt, better, worse = split_shared(chosen, rejected)
    return [
        ranking(
            prompt,
            [better, worse],
            [[0], [1]],
            ANNOTATOR,
            names=("'chosen'", "'rejected'"),
            criterion=criterion or OVERALL,
        )
    ]


EXAMPLE = (
    '{"chosen": "\\n\\nHuman: What is a good name for a goldfish?\\n\\nAssistant: How about Goldie?'
    '\\n\\nHuman: Something less common?\\n\\nAssistant: Maybe Sunny, for its colour.", '
    '"rejected": "\\n\\nHuman: What is a good name for a goldfish?\\n\\nAssistant: How about Goldie?'
    '\\n\\nHuman: Something less common?\\n\\nAssistant: Fish."}'
)

FORMAT = Format(
    name="hh-rlhf",
    columns=frozenset({"chosen", "rejected"}),
    parse=parse,
    options={"criterion": None},
    example=EXAMPLE,
    annotator=ANNOTATOR,
    kind="human",
    judged_by="crowdworkers",
    texts=frozenset({"chosen", "rejected"}),
    on_request=("helpfulness", "harmlessness"),
    subsets={"helpful-": "helpfulness", "harmless-": "harmlessness"},
)
