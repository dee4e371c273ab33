"""PKU-Alignment/PKU-SafeRLHF: a `prompt`, `response_0` and `response_1`, and two verdicts.

`better_response_id` (0 or 1) says which response is more helpful, `safer_response_id` which is
safer. `--dimension` picks the verdict (better by default); each is its own annotator
(`pku-saferlhf-better`, `pku-saferlhf-safer`), so importing both keeps both. The other verdict and
the safety labels are kept in the ranking's details; `response_0_source`/`response_1_source` (the
model that wrote each) become the candidates' models. An id may come as 1.0, as pandas writes an
integer column with a missing value.

Who chose: people. The dataset card (huggingface.co/datasets/PKU-Alignment/PKU-SafeRLHF, "Human-Preference
on Harmlessness and Helpfulness", tagged human-feedback) and its paper (arXiv 2406.15513, project page
sites.google.com/view/pku-saferlhf) say the two preferences, helpfulness and harmlessness decoupled, are
human preference annotations; only the safety meta-labels (`is_response_*_safe`, the harm categories
and severity levels, kept in the details) were made by people and AI together. The first release's card
(PKU-SafeRLHF-30K, v0) calls its rows "expert comparison data".
"""

from __future__ import annotations

from typing import Any

from preflab.db.ingest.datasets.base import Format, integer, ranking, text
from preflab.db.ingest.records import RankingRecord

ANNOTATOR = "pku-saferlhf-{}"
_IDS = ("better_response_id", "safer_response_id")
_KEPT = (
    "better_response_id",
    "safer_response_id",
    "is_response_0_safe",
    "is_response_1_safe",
    "response_0_severity_level",
    "response_1_severity_level",
)


def parse(row: dict[str, Any], dimension: str = "better") -> list[RankingRecord]:
    first = integer(row, f"{dimension}_response_id", (0, 1))
    models = [row.get(f"response_{i}_source") for i in (0, 1)]
    details = {key: row[key] for key in _KEPT if key in row and isinstance(row[key], (bool, int, float, str))}
    for key in _IDS:  # the verdicts as the integers they are, however the file wrote them
        if isinstance(details.get(key), float) and details[key].is_integer():
            details[key] = int(details[key])
    return [
        ranking(
            text(row, "prompt"),
            [text(row, "response_0"), text(row, "response_1")],
            [[first], [1 - first]],
            ANNOTATOR.format(dimension),
            details=details,
            models=[m if isinstance(m, str) and m.strip() else None for m in models],
            names=("'response_0'", "'response_1'"),
        )
    ]


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
    options={"dimension": "better"},
    example=EXAMPLE,
    annotator=ANNOTATOR.format("<dimension>"),
    kind="human",
    judged_by="human annotators",
    texts=frozenset({"prompt", "response_0", "response_1", "prompt_source", "response_0_source", "response_1_source"}),
)
