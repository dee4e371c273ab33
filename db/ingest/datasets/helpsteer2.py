"""nvidia/HelpSteer2: each reply rated by people on five attributes; a prompt's replies ranked once per attribute.

A row holds a `prompt`, one `response` to it, and five ratings of the response, each an integer from 0
to 4: `helpfulness`, `correctness`, `coherence`, `complexity` and `verbosity`. The dataset card
(huggingface.co/datasets/nvidia/HelpSteer2) says each is "human-annotated", "ranging between 0 and 4
where higher means better for each attribute", that the data was made with Scale AI, and that
"consecutive samples (e.g. sample 1 with 2, 3 with 4 ...) share the same prompt". So the rows are grouped
by `prompt` (`Format.group_by`: a prompt's rows must be together, as in the released files), and each
group gives one ranking per attribute, named after it (`ATTRIBUTES`): the replies by that rating, highest
first, equal ratings sharing a tier (a tie, which gives no pair), the ratings kept as the scores.
`--criterion NAME` keeps one attribute. People rated them: one human annotator, `nvidia/HelpSteer2` (the
rows do not say which person). The first HelpSteer (nvidia/HelpSteer) has the same shape.

A multi-turn prompt holds its earlier turns in the text, as the card shows: "{user turn 1}
<extra_id_1>Assistant {assistant turn 1} <extra_id_1>User {user turn 2}", each marker on a line of its
own; it is read as those messages (`prompt_turns`), the response being the last assistant turn.

A group of one reply ranks nothing and is quarantined, saying so; so is a group whose replies are
identical or empty (every attribute gives the same reason). A rating that is missing or not one of 0-4
gives no ranking for its attribute alone, quarantined as a part of the group named by the attribute,
and the group's other attributes are stored (`by_criteria`).
"""

from __future__ import annotations

import re
from typing import Any

from preflab.db.conversation import Messages
from preflab.db.ingest.datasets.base import Format, Replies, by_criteria, integer, text, without_empty
from preflab.db.ingest.records import RankingRecord
from preflab.errors import Invalid

ANNOTATOR = "nvidia/HelpSteer2"
ATTRIBUTES = ("helpfulness", "correctness", "coherence", "complexity", "verbosity")
RATINGS = (0, 1, 2, 3, 4)
_MARK = re.compile(r"\n?<extra_id_1>(User|Assistant)\n")
_ROLES = {"User": "user", "Assistant": "assistant"}


def prompt_turns(value: str) -> str | Messages:
    """A prompt as the dataset writes it: its text, or the messages a multi-turn prompt's markers separate."""
    parts = _MARK.split(value)
    if len(parts) == 1:
        return value
    turns = [{"role": "user", "content": parts[0].strip()}]
    turns += [{"role": _ROLES[role], "content": content.strip()} for role, content in zip(parts[1::2], parts[2::2])]
    return turns


def parse(rows: list[dict[str, Any]], criterion: str | None = None) -> list[RankingRecord]:
    """One ranking of a prompt's replies per attribute (`criterion`: that one alone); raises Invalid."""
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise Invalid(f"row {i} of the prompt's rows is {type(row).__name__}, not an object")
    if len(rows) < 2:
        raise Invalid("one reply to its prompt, none to rank it against (HelpSteer2 rates two replies a prompt)")
    prompt = prompt_turns(text(rows[0], "prompt"))
    names = [f"reply {i}" for i in range(len(rows))]
    kept, empty = without_empty([row.get("response") for row in rows], names, rows)
    replies = Replies(prompt, [row.get("response") for row in rows], names)

    def by(attribute: str) -> RankingRecord:
        scores = []
        for i in kept:
            try:
                scores.append(float(integer(rows[i], attribute, RATINGS)))
            except Invalid as exc:
                raise Invalid(f"{names[i]}: {exc}") from None
        tiers = [[j for j, s in enumerate(scores) if s == value] for value in sorted(set(scores), reverse=True)]
        return replies.ranking(kept, tiers, ANNOTATOR, scores=scores, criterion=attribute)

    records = by_criteria(ATTRIBUTES if criterion is None else (criterion,), by, rows, "prompt")
    records[0].set_aside[:0] = empty  # an empty reply is set aside once, whatever the attributes
    return records


EXAMPLE = "\n".join(
    (
        '{"prompt": "Name a prime number.", "response": "7 is prime.", "helpfulness": 4, "correctness": 4, '
        '"coherence": 4, "complexity": 1, "verbosity": 1}',
        '{"prompt": "Name a prime number.", "response": "9 is prime.", "helpfulness": 1, "correctness": 0, '
        '"coherence": 4, "complexity": 1, "verbosity": 1}',
    )
)

FORMAT = Format(
    name="helpsteer2",
    columns=frozenset({"prompt", "response", *ATTRIBUTES}),
    parse=parse,
    group_by="prompt",
    group_name="prompt",
    options={"criterion": None},
    example=EXAMPLE,
    annotator=ANNOTATOR,
    kind="human",
    judged_by="human annotators (Scale AI)",
    texts=frozenset({"prompt", "response"}),
    criteria=ATTRIBUTES,
)
