"""stanfordnlp/SHP: a Reddit post (`history`) and two top-level comments, `human_ref_A` and `human_ref_B`.

`labels` 1 means A is preferred, 0 B (1.0 and 0.0, as pandas writes a column with a missing value, too):
one pair, by the post's readers, whose upvotes made the preference (people: one human annotator, `shp`). The
`score_ratio` (the preferred comment's score over the other's) is kept in the ranking's details.
The ranking's id is the post's and the two comments' (`post_id`, `c_root_id_A`, `c_root_id_B`).
"""

from __future__ import annotations

from typing import Any

from preflab.db.ingest.datasets.base import Format, integer, number, ranking, text
from preflab.db.ingest.records import RankingRecord

ANNOTATOR = "shp"
_ID = ("post_id", "c_root_id_A", "c_root_id_B")


def parse(row: dict[str, Any]) -> list[RankingRecord]:
    a_preferred = integer(row, "labels", (1, 0))
    ids = [row.get(key) for key in _ID]
    external_id = "/".join(ids) if all(isinstance(i, str) and i for i in ids) else None
    return [
        ranking(
            text(row, "history"),
            [text(row, "human_ref_A"), text(row, "human_ref_B")],
            [[0], [1]] if a_preferred == 1 else [[1], [0]],
            ANNOTATOR,
            details={"score_ratio": number(row, "score_ratio")},
            external_id=external_id,
            names=("'human_ref_A'", "'human_ref_B'"),
        )
    ]


EXAMPLE = (
    '{"post_id": "qt3nxl", "domain": "askculinary_train", "upvote_ratio": 0.98, '
    '"history": "What is the best way to keep basil fresh?", "c_root_id_A": "hkh25sc", '
    '"c_root_id_B": "hkh25lp", "created_at_utc_A": 1636822112, "created_at_utc_B": 1636822110, '
    '"score_A": 340, "score_B": 166, "human_ref_A": "Stems in a glass of water, on the counter.", '
    '"human_ref_B": "Freeze it.", "labels": 1, "seconds_difference": 2.0, "score_ratio": 2.048}'
)

FORMAT = Format(
    name="shp",
    columns=frozenset({"history", "human_ref_A", "human_ref_B", "labels"}),
    parse=parse,
    example=EXAMPLE,
    annotator=ANNOTATOR,
    kind="human",
    judged_by="Reddit users (their upvotes)",
    texts=frozenset({"post_id", "domain", "history", "c_root_id_A", "c_root_id_B", "human_ref_A", "human_ref_B"}),
)
