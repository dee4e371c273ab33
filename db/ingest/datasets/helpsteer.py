"""nvidia/HelpSteer3 preference rows: two replies to a conversation, and how much better one is.

A row holds the `context` (the conversation so far, as messages ending with the
user's turn), `response1`, `response2`, the `overall_preference` from -3 (response 1
is much better) through 0 (about the same) to 3 (response 2 is much better), and
the `individual_preference` of each annotator (`score`, `reasoning`) it aggregates: people
(the dataset card: human annotators), one human annotator `nvidia/HelpSteer3` for the dataset.
`overall_preference` may come as -3.0, as pandas writes an integer column with a missing value.

Below 0 response 1 ranks first, above 0 response 2 does, and 0 is a tie (one tier:
no pair). The scores kept are 0 for response 1 and `overall_preference` for response
2 (how much better response 2 is), so a pair's margin is |overall_preference|. The
individual preferences, the domain and the language are kept in the ranking's details.
"""

from __future__ import annotations

from typing import Any

from preflab.db.ingest.datasets.base import Format, integer, messages_or_text, ranking
from preflab.db.ingest.records import RankingRecord

ANNOTATOR = "nvidia/HelpSteer3"
KEPT = ("domain", "language", "individual_preference")
PREFERENCES = (-3, -2, -1, 0, 1, 2, 3)


def parse(row: dict[str, Any]) -> list[RankingRecord]:
    """One ranking of the two responses by `overall_preference`; raises Invalid."""
    value = integer(row, "overall_preference", PREFERENCES)
    context = messages_or_text(row, "context")
    tiers = [[0], [1]] if value < 0 else [[1], [0]] if value > 0 else [[0, 1]]
    details = {"overall_preference": value, **{key: row[key] for key in KEPT if row.get(key) is not None}}
    return [
        ranking(
            context,
            [row.get("response1"), row.get("response2")],
            tiers,
            ANNOTATOR,
            scores=[0.0, float(value)],
            details=details,
            names=("'response1'", "'response2'"),
        )
    ]


EXAMPLE = (
    '{"domain": "general", "language": "english", "context": [{"role": "user", "content": "Say hi."}, '
    '{"role": "assistant", "content": "Hi!"}, {"role": "user", "content": "In French?"}], '
    '"response1": "Bonjour !", "response2": "Hola!", "overall_preference": -3, "individual_preference": '
    '[{"score": -3, "reasoning": "@Response 2 is Spanish."}, {"score": -2, "reasoning": "@Response 1 is '
    'correct."}]}'
)

FORMAT = Format(
    name="helpsteer3",
    columns=frozenset({"context", "response1", "response2", "overall_preference"}),
    parse=parse,
    example=EXAMPLE,
    annotator=ANNOTATOR,
    kind="human",
    judged_by="human annotators",
    texts=frozenset({"domain", "language", "context", "response1", "response2"}),
)
