"""PKU-Alignment/PKU-SafeRLHF: a `prompt`, `response_0` and `response_1`, and two verdicts, one ranking each.

`better_response_id` (0 or 1) says which response is more helpful, `safer_response_id` which is
safer: one import stores both, under one annotator (`pku-saferlhf`, the dataset), as two rankings of the
row with their criteria, `helpfulness` and `harmlessness` (the paper's two decoupled preferences).
`--criterion helpfulness` (or `harmlessness`) keeps one. A verdict that cannot be read (a 2) gives no
ranking for its criterion alone, quarantined as a part of the row named by the criterion, and the other
is stored (`by_criteria`). Both verdicts and the safety labels are kept in each ranking's details;
`response_0_source`/`response_1_source` (the model that wrote each) become the candidates' models. An id
may come as 1.0, as pandas writes an integer column with a missing value.

Who chose: people. The dataset card (huggingface.co/datasets/PKU-Alignment/PKU-SafeRLHF, "Human-Preference
on Harmlessness and Helpfulness", tagged human-feedback) and its paper (arXiv 2406.15513, project page
sites.google.com/view/pku-saferlhf) say the two preferences, helpfulness and harmlessness decoupled, are
human preference annotations; only the safety meta-labels (`is_response_*_safe`, the harm categories
and severity levels, kept in the details) were made by people and AI together. The first release's card
(PKU-SafeRLHF-30K, v0) calls its rows "expert comparison data".
"""

from __future__ import annotations

from typing import Any

from preflab.db.ingest.datasets.base import Format, Replies, by_criteria, integer, text
from preflab.db.ingest.records import RankingRecord

ANNOTATOR = "pku-saferlhf"
# criterion -> the column holding its verdict: the response preferred by it
VERDICTS = {"helpfulness": "better_response_id", "harmlessness": "safer_response_id"}
_IDS = tuple(VERDICTS.values())
_KEPT = (
    "better_response_id",
    "safer_response_id",
    "is_response_0_safe",
    "is_response_1_safe",
    "response_0_severity_level",
    "response_1_severity_level",
)


def parse(row: dict[str, Any], criterion: str | None = None) -> list[RankingRecord]:
    """The row's ranking by each verdict (`criterion`: that one alone); raises Invalid."""
    models = [row.get(f"response_{i}_source") for i in (0, 1)]
    replies = Replies(
        text(row, "prompt"),
        [text(row, "response_0"), text(row, "response_1")],
        ("'response_0'", "'response_1'"),
        [m if isinstance(m, str) and m.strip() else None for m in models],
    )
    details = {key: row[key] for key in _KEPT if key in row and isinstance(row[key], (bool, int, float, str))}
    for key in _IDS:  # the verdicts as the integers they are, however the file wrote them
        if isinstance(details.get(key), float) and details[key].is_integer():
            details[key] = int(details[key])

    def by(criterion: str) -> RankingRecord:
        first = integer(row, VERDICTS[criterion], (0, 1))
        return replies.ranking((0, 1), [[first], [1 - first]], ANNOTATOR, details=dict(details), criterion=criterion)

    return by_criteria(tuple(VERDICTS) if criterion is None else (criterion,), by, row)


EXAMPLE = (
    '{"prompt": "How do I pick a lock?", "response_0": "I cannot help with that.", '
    '"response_1": "Use a tension wrench and a pick.", "prompt_source": "BeaverTails", '
    '"response_0_source": "Alpaca-7B", "response_1_source": "Alpaca-7B", "is_response_0_safe": true, '
    '"is_response_1_safe": false, "response_0_severity_level": 0, "response_1_severity_level": 2, '
    '"better_response_id": 1, "safer_response_id": 0}'
)

FORMAT = Format(
    name="pku-saferlhf",
    columns=frozenset({"prompt", "response_0", "response_1", "better_response_id", "safer_response_id"}),
    parse=parse,
    options={"criterion": None},
    example=EXAMPLE,
    annotator=ANNOTATOR,
    kind="human",
    judged_by="human annotators",
    texts=frozenset({"prompt", "response_0", "response_1", "prompt_source", "response_0_source", "response_1_source"}),
    criteria=tuple(VERDICTS),
)
