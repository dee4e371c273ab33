"""shp: stanfordnlp/SHP rows become one pair of comments, the score ratio kept."""

import pytest

from preflab.db.ingest.datasets.shp import FORMAT
from preflab.errors import Invalid
from tests.db.ingest.datasets.shapes_b import pairs, parsed, quarantined, run_import, stored, write_jsonl


def row(post, a, b, labels, ratio, history="What is the best way to keep basil fresh?"):
    """A row as askculinary/train.json holds it."""
    return {
        "post_id": post,
        "domain": "askculinary_train",
        "upvote_ratio": 0.98,
        "history": history,
        "c_root_id_A": f"{post}a",
        "c_root_id_B": f"{post}b",
        "created_at_utc_A": 1636822112,
        "created_at_utc_B": 1636822110,
        "score_A": 340,
        "score_B": 166,
        "human_ref_A": a,
        "human_ref_B": b,
        "labels": labels,
        "seconds_difference": 2.0,
        "score_ratio": ratio,
    }


ROWS = [
    row("qt3nxl", "Stems in a glass of water.", "Freeze it.", 1, 2.048),
    row("qt3nxm", "In the fridge.", "Dry it in the oven.", 0, 1.5),
    row("qt3nxn", "Same.", "Same.", 1, 3.0),
    row("qt3nxo", "A.", "B.", "1", 3.0),
    row("qt3nxp", "A.", "B.", 1, None),
    row("qt3nxq", "A.", "B.", 1, 3.0, history=""),
]
REASONS = {
    "train:2": "'human_ref_A' and 'human_ref_B' are identical",
    "train:3": "'labels' is '1', not one of 1, 0",
    "train:4": "missing 'score_ratio'",
    "train:5": "'history' must be a non-empty string, not ''",
}


def test_rows_parse_row_by_row():
    assert parsed(FORMAT.parse(ROWS[0])) == [
        {
            "prompt": "What is the best way to keep basil fresh?",
            "tiers": [["Stems in a glass of water."], ["Freeze it."]],
            "models": [None, None],
            "scores": None,
            "details": {"score_ratio": 2.048},
            "annotator": "shp",
            "kind": "human",
            "external_id": "qt3nxl/qt3nxla/qt3nxlb",
        }
    ]
    assert parsed(FORMAT.parse(ROWS[1]))[0]["tiers"] == [["Dry it in the oven."], ["In the fridge."]]
    for locator, reason in REASONS.items():
        with pytest.raises(Invalid) as caught:
            FORMAT.parse(ROWS[int(locator.split(":")[1])])
        assert str(caught.value) == reason


def test_import_pairs_keep_the_score_ratio(sessions, tmp_path):
    # SHP's files are JSON Lines named .json
    path = write_jsonl(tmp_path / "train.json", ROWS)
    summary = run_import(sessions, path, "shp")
    assert (summary.rows, summary.rankings, summary.ties, summary.quarantined) == (6, 2, 0, 4)
    assert quarantined(sessions) == REASONS
    assert [(r["details"], r["external_id"], r["annotator"]) for r in stored(sessions)] == [
        ({"score_ratio": 2.048}, "qt3nxl/qt3nxla/qt3nxlb", ("human", "shp")),
        ({"score_ratio": 1.5}, "qt3nxm/qt3nxma/qt3nxmb", ("human", "shp")),
    ]
    assert pairs(sessions) == sorted(
        [("Stems in a glass of water.", "Freeze it.", 1.0), ("Dry it in the oven.", "In the fridge.", 1.0)]
    )
    # the same post and comments under other bytes (another export) are the same ranking
    write_jsonl(path, [dict(reversed(list(r.items()))) for r in ROWS[:2]])
    again = run_import(sessions, path, "shp")
    assert (again.rankings, again.duplicates) == (0, 2)
