"""helpsteer3: nvidia/HelpSteer3 preference rows become a ranking of response1 and response2."""

import json

import pytest

from preflab.db.ingest.datasets.helpsteer import FORMAT
from preflab.errors import Invalid
from tests.db.ingest.datasets.shapes_b import (
    ordered,
    pairs,
    parsed,
    quarantined,
    run_import,
    sqlite_only,
    stored,
    write_jsonl,
    write_parquet,
)


def user(text):
    return {"role": "user", "content": text}


def bot(text):
    return {"role": "assistant", "content": text}


def row(context, response1, response2, overall, domain="general", language="english", individual=None):
    individual = (
        individual
        if individual is not None
        else [
            {"score": overall, "reasoning": f"@Response {1 if overall < 0 else 2} is better."},
            {"score": overall, "reasoning": "Agreed."},
        ]
    )
    return {
        "domain": domain,
        "language": language,
        "context": context,
        "response1": response1,
        "response2": response2,
        "overall_preference": overall,
        "individual_preference": individual,
    }


CODE_CONTEXT = [user("Sort a list in Python"), bot("Use sorted(xs)."), user("In place?")]
ROWS = [
    row(
        CODE_CONTEXT,
        "xs.sort()",
        "sorted(xs)",
        -2,
        domain="code",
        language="python",
        individual=[
            {"score": -2, "reasoning": "@Response 1 sorts in place."},
            {"score": -1, "reasoning": "@Response 1 is slightly better."},
            {"score": -3, "reasoning": "@Response 2 is not in place."},
        ],
    ),
    row(
        [user("用一句话介绍北京。")],
        "北京是中国的首都。",
        "北京是中国的首都，有三千多年的历史。",
        3,
        domain="multilingual",
        language="chinese",
    ),
    row([user("Say hi")], "Hi!", "Hello!", 0),
    row([user("Say hi")], "Hi!", "Hello!", 5),
    row([user("Hi"), bot("Hello")], "A", "B", -1),
    row([user("Say hi")], "Hi!", "", 1),
    {k: v for k, v in row([user("x")], "A", "B", 1).items() if k != "context"},
    row([user("Say hi")], "Hi!", "Hi!", -1),
]
RESULTS = [
    {
        "prompt": ("user: Sort a list in Python", "assistant: Use sorted(xs).", "user: In place?"),
        "tiers": [["xs.sort()"], ["sorted(xs)"]],
        "scores": [0.0, -2.0],
        "details": {
            "overall_preference": -2,
            "domain": "code",
            "language": "python",
            "individual_preference": [
                {"score": -2, "reasoning": "@Response 1 sorts in place."},
                {"score": -1, "reasoning": "@Response 1 is slightly better."},
                {"score": -3, "reasoning": "@Response 2 is not in place."},
            ],
        },
    },
    {
        "prompt": "用一句话介绍北京。",
        "tiers": [["北京是中国的首都，有三千多年的历史。"], ["北京是中国的首都。"]],
        "scores": [0.0, 3.0],
        "details": {
            "overall_preference": 3,
            "domain": "multilingual",
            "language": "chinese",
            "individual_preference": [
                {"score": 3, "reasoning": "@Response 2 is better."},
                {"score": 3, "reasoning": "Agreed."},
            ],
        },
    },
    {
        "prompt": "Say hi",
        "tiers": [["Hi!", "Hello!"]],
        "scores": [0.0, 0.0],
        "details": {
            "overall_preference": 0,
            "domain": "general",
            "language": "english",
            "individual_preference": [
                {"score": 0, "reasoning": "@Response 2 is better."},
                {"score": 0, "reasoning": "Agreed."},
            ],
        },
    },
    "'overall_preference' is 5, not one of -3, -2, -1, 0, 1, 2, 3",
    "the prompt ends with an assistant turn; a prompt ends with the user's message",
    "'response2' is not a non-empty string",
    "missing 'context'",
    "'response1' and 'response2' are identical",
]


def test_parse_row_by_row():
    for row_, expected in zip(ROWS, RESULTS, strict=True):
        if isinstance(expected, str):
            with pytest.raises(Invalid) as caught:
                FORMAT.parse(row_)
            assert str(caught.value) == expected
            continue
        (got,) = parsed(FORMAT.parse(row_))
        assert {key: got[key] for key in expected} == expected
        assert (got["annotator"], got["kind"], got["external_id"]) == ("nvidia/HelpSteer3", "human", None)


@pytest.mark.parametrize("writer", [write_jsonl, write_parquet], ids=["jsonl", "parquet"])
def test_import_rankings_ties_margins_quarantine_and_reimport(sessions, tmp_path, writer):
    path = writer(tmp_path / ("hs3.jsonl" if writer is write_jsonl else "hs3.parquet"), ROWS)
    summary = run_import(sessions, path, "helpsteer3")
    assert (summary.rows, summary.rankings, summary.ties, summary.quarantined) == (8, 3, 1, 5)
    got = stored(sessions)
    assert [{key: r[key] for key in ("prompt", "tiers", "details")} for r in got] == [
        {key: r[key] for key in ("prompt", "tiers", "details")} for r in RESULTS[:3]
    ]
    assert got[0]["scores"] == {"xs.sort()": 0.0, "sorted(xs)": -2.0}
    assert quarantined(sessions) == {f"train:{i}": RESULTS[i] for i in range(3, 8)}
    # |overall_preference| is the margin; the tie gives no pair
    assert pairs(sessions) == ordered(
        [("xs.sort()", "sorted(xs)", 2.0), ("北京是中国的首都，有三千多年的历史。", "北京是中国的首都。", 3.0)]
    )

    again = run_import(sessions, path, "helpsteer3")
    assert (again.rankings, again.duplicates) == (0, 3)


@sqlite_only
def test_auto_picks_helpsteer3_from_the_columns(sessions, tmp_path):
    summary = run_import(sessions, write_jsonl(tmp_path / "hs3.jsonl", ROWS[:3]), "auto")
    assert (summary.format, summary.rankings) == ("helpsteer3", 3)


def test_the_example_row_gives_its_ranking():
    (got,) = parsed(FORMAT.parse(json.loads(FORMAT.example)))
    assert (got["prompt"], got["tiers"], got["scores"]) == (
        ("user: Say hi.", "assistant: Hi!", "user: In French?"),
        [["Bonjour !"], ["Hola!"]],
        [0.0, -3.0],
    )
