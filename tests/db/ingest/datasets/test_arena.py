"""arena: Chatbot Arena battles in their three published shapes become rankings of the two replies."""

import json

import pytest
from sqlalchemy import select

from preflab.db.ingest.datasets.arena import FORMAT
from preflab.db.models import Annotator
from preflab.errors import Invalid
from tests.db.ingest.datasets.shapes_b import (
    ordered,
    pairs,
    parsed,
    quarantined,
    run_import,
    sqlite_only,
    stored,
    write_csv,
    write_jsonl,
    write_parquet,
)


def user(text):
    return {"role": "user", "content": text}


def bot(text):
    return {"role": "assistant", "content": text}


def battle(qid, winner, a, b, judge="arena_user_1", models=("vicuna-13b", "koala-13b")):
    """A lmsys/chatbot_arena_conversations row."""
    return {
        "question_id": qid,
        "model_a": models[0],
        "model_b": models[1],
        "winner": winner,
        "judge": judge,
        "conversation_a": a,
        "conversation_b": b,
        "turn": sum(m["role"] == "user" for m in a),
        "anony": True,
        "language": "English",
        "tstamp": 1682351591.1322,
    }


CONVERSATIONS = [
    battle("c0", "model_a", [user("Hi"), bot("Hello!")], [user("Hi"), bot("hey")]),
    # a battle that went on: the prompt is the first user turn, each reply the rest of its side
    battle(
        "c1",
        "model_b",
        [user("Joke?"), bot("A pun."), user("Another"), bot("A limerick.")],
        [user("Joke?"), bot("A riddle."), user("Another"), bot("A haiku.")],
        judge="arena_user_2",
    ),
    battle("c2", "tie", [user("2+2?"), bot("4")], [user("2+2?"), bot("Four.")]),
    battle("c3", "tie (bothbad)", [user("Capital of Mars?"), bot("Paris")], [user("Capital of Mars?"), bot("Rome")]),
    battle("c4", "model_c", [user("Hi"), bot("A")], [user("Hi"), bot("B")]),
    # two models gave the same reply: a battle of its one reply (issue 46 §1h)
    battle("c5", "model_a", [user("Hi"), bot("Same")], [user("Hi"), bot("Same")]),
    battle("c6", "model_a", [user("Hi"), bot("A")], [user("Hi"), {"role": "bot", "content": "B"}]),
    # identical first replies: the prompt runs to the first turn where the sides differ
    battle(
        "c7",
        "model_b",
        [user("Count"), bot("1"), user("More"), bot("2, 3")],
        [user("Count"), bot("1"), user("More"), bot("2")],
    ),
    # the same reply, but only one model named: not a battle of two models, so quarantined as before
    battle("c8", "model_a", [user("Hi"), bot("Same")], [user("Hi"), bot("Same")], models=("vicuna-13b", None)),
]
CONVERSATION_RESULTS = [
    {
        "prompt": "Hi",
        "tiers": [["Hello!"], ["hey"]],
        "details": {"winner": "model_a"},
        "external_id": "c0",
        "annotator": "arena_user_1",
    },
    {
        "prompt": "Joke?",
        "tiers": [
            [("assistant: A riddle.", "user: Another", "assistant: A haiku.")],
            [("assistant: A pun.", "user: Another", "assistant: A limerick.")],
        ],
        "details": {"winner": "model_b"},
        "external_id": "c1",
        "annotator": "arena_user_2",
    },
    {
        "prompt": "2+2?",
        "tiers": [["4", "Four."]],
        "details": {"winner": "tie", "both_bad": False},
        "external_id": "c2",
        "annotator": "arena_user_1",
    },
    {
        "prompt": "Capital of Mars?",
        "tiers": [["Paris", "Rome"]],
        "details": {"winner": "tie (bothbad)", "both_bad": True},
        "external_id": "c3",
        "annotator": "arena_user_1",
    },
    "'winner' is 'model_c', not one of 'model_a', 'model_b', 'tie', 'tie (bothbad)', 'both_bad'",
    {
        "prompt": "Hi",
        "tiers": [["Same"]],
        "details": {"winner": "model_a", "identical": ["vicuna-13b", "koala-13b"]},
        "external_id": "c5",
        "annotator": "arena_user_1",
    },
    "'conversation_b'[1] has an unknown role 'bot' (expected system, user or assistant)",
    {
        "prompt": ("user: Count", "assistant: 1", "user: More"),
        "tiers": [["2"], ["2, 3"]],
        "details": {"winner": "model_b"},
        "external_id": "c7",
        "annotator": "arena_user_1",
    },
    "'conversation_a' and 'conversation_b' are identical",
]


def kaggle(id, prompt, a, b, winner, models=("gpt-4-0613", "claude-2.1")):
    """An arena-human-preference-55k row: the turns are JSON-encoded lists; the verdict three 0/1 columns."""
    return {
        "id": id,
        "model_a": models[0],
        "model_b": models[1],
        "prompt": json.dumps(prompt),
        "response_a": json.dumps(a),
        "response_b": json.dumps(b),
        **{f"winner_{name}": int(name == winner) for name in ("model_a", "model_b", "tie")},
    }


KAGGLE = [
    kaggle(30192, ["Is 7 prime?"], ["Yes."], ["No."], "model_a"),
    kaggle(53567, ["Hi"], ["Hello"], ["Hey there"], "tie"),
    kaggle(65089, ["Name a fruit", "Another"], ["Apple", "Pear"], ["Plum", "Fig"], "model_b"),
    kaggle(96401, ["Hi"], ["Hello"], [None], "model_a"),
    {**kaggle(198779, ["Hi"], ["A"], ["B"], "model_a"), "winner_model_b": 1},
    # an emoji cut in half when the turns were encoded: a lone surrogate, escaped, inside the column's JSON
    {**kaggle(292873, ["Hi"], ["A"], ["B"], "model_a"), "prompt": '["Hi \\ud83d"]'},
]
KAGGLE_RESULTS = [
    {
        "prompt": "Is 7 prime?",
        "tiers": [["Yes."], ["No."]],
        "details": {"winner": "model_a"},
        "external_id": "30192",
        "annotator": "lmarena-ai/arena-human-preference-55k",
    },
    {
        "prompt": "Hi",
        "tiers": [["Hello", "Hey there"]],
        "details": {"winner": "tie"},
        "external_id": "53567",
        "annotator": "lmarena-ai/arena-human-preference-55k",
    },
    {
        "prompt": "Name a fruit",
        "tiers": [
            [("assistant: Plum", "user: Another", "assistant: Fig")],
            [("assistant: Apple", "user: Another", "assistant: Pear")],
        ],
        "details": {"winner": "model_b"},
        "external_id": "65089",
        "annotator": "lmarena-ai/arena-human-preference-55k",
    },
    "'response_b'[0] is None, not text",
    "unknown winner: winner_model_a, winner_model_b and winner_tie are 1, 1, 0 (exactly one must be 1)",
    "'prompt'[0]['content'] holds a lone UTF-16 surrogate (\\ud83d), which is not text the database can store",
]


def parts(message, *texts, kind="text"):
    return {
        "role": message["role"],
        "content": [
            {"type": kind, "text": t, "image": None, "mimeType": None} for t in (texts or [message["content"]])
        ],
    }


def vote(id, winner, a, b):
    """An arena-human-preference-140k row: message content is a list of {type, text} parts."""
    return {
        "id": id,
        "model_a": "gemini-2.5-pro",
        "model_b": "o3-2025-04-16",
        "winner": winner,
        "evaluation_session_id": f"s-{id}",
        "evaluation_order": 1,
        "conversation_a": a,
        "conversation_b": b,
        "language": "en",
        "is_code": False,
    }


ARENA_140K = [
    vote(
        "h0", "both_bad", [parts(user("Weather?")), parts(bot("Sunny"))], [parts(user("Weather?")), parts(bot("Rain"))]
    ),
    vote(
        "h1",
        "model_a",
        [parts(user("Haiku"), "Write a haiku", "about rain"), parts(bot("Drops fall"))],
        [parts(user("Haiku"), "Write a haiku", "about rain"), parts(bot("Rain rain"))],
    ),
    vote(
        "h2",
        "model_b",
        [parts(user("See this"), kind="image"), parts(bot("A cat"))],
        [parts(user("See this"), kind="image"), parts(bot("A dog"))],
    ),
]
ARENA_140K_RESULTS = [
    {
        "prompt": "Weather?",
        "tiers": [["Sunny", "Rain"]],
        "details": {"winner": "both_bad", "both_bad": True},
        "external_id": "h0",
        "annotator": "lmarena-ai/arena-human-preference-140k",
    },
    {
        "prompt": "Write a haiku\n\nabout rain",
        "tiers": [["Drops fall"], ["Rain rain"]],
        "details": {"winner": "model_a"},
        "external_id": "h1",
        "annotator": "lmarena-ai/arena-human-preference-140k",
    },
    "'conversation_a'[0] 'content'[0] is of type 'image', not text (only text battles can be imported)",
]


@pytest.mark.parametrize(
    "rows, results",
    [(CONVERSATIONS, CONVERSATION_RESULTS), (KAGGLE, KAGGLE_RESULTS), (ARENA_140K, ARENA_140K_RESULTS)],
    ids=["conversations", "55k", "140k"],
)
def test_parse_row_by_row(rows, results):
    for row, expected in zip(rows, results, strict=True):
        if isinstance(expected, str):
            with pytest.raises(Invalid) as caught:
                FORMAT.parse(row)
            assert str(caught.value) == expected
            continue
        (got,) = parsed(FORMAT.parse(row))
        assert {key: got[key] for key in expected} == expected
        assert got["kind"] == "human" and got["scores"] is None
        # a battle of identical replies holds the one reply, model_a's (its details name both models)
        sides = 1 if "identical" in got["details"] else 2
        assert got["models"] == [row["model_a"], row["model_b"]][:sides]


def quarantine_of(rows, results):
    return {f"train:{i}": reason for i, reason in enumerate(results) if isinstance(reason, str)}


@pytest.mark.parametrize(
    "rows, results, writer",
    [
        (CONVERSATIONS, CONVERSATION_RESULTS, write_jsonl),
        (KAGGLE, KAGGLE_RESULTS, write_parquet),
        (KAGGLE, KAGGLE_RESULTS, write_csv),
        (ARENA_140K, ARENA_140K_RESULTS, write_parquet),
    ],
    ids=["conversations-jsonl", "55k-parquet", "55k-csv", "140k-parquet"],
)
def test_import_rankings_ties_pairs_quarantine_and_reimport(sessions, tmp_path, rows, results, writer):
    suffix = {write_jsonl: "jsonl", write_parquet: "parquet", write_csv: "csv"}[writer]
    path = writer(tmp_path / f"arena.{suffix}", rows)
    ranked = [r for r in results if not isinstance(r, str)]
    summary = run_import(sessions, path, "arena")
    # a whole tie, or a battle of identical replies voted a tie
    ties = sum(
        len(r["tiers"]) == 1 and ("identical" not in r["details"] or "tie" in r["details"]["winner"]) for r in ranked
    )
    assert (summary.rows, summary.rankings, summary.ties, summary.quarantined) == (
        len(rows),
        len(ranked),
        ties,
        len(rows) - len(ranked),
    )
    got = stored(sessions)
    assert [{key: r[key] for key in ("prompt", "tiers", "details", "external_id")} for r in got] == [
        {key: r[key] for key in ("prompt", "tiers", "details", "external_id")} for r in ranked
    ]
    assert [r["annotator"] for r in got] == [("human", r["annotator"]) for r in ranked]
    assert quarantined(sessions) == quarantine_of(rows, results)
    # the winner beats the loser (margin 1, by tiers); a tie of either kind gives no pair
    assert pairs(sessions) == ordered((r["tiers"][0][0], r["tiers"][1][0], 1.0) for r in ranked if len(r["tiers"]) == 2)

    again = run_import(sessions, path, "arena")
    assert (again.rankings, again.duplicates) == (0, len(ranked))


@sqlite_only
def test_models_become_the_candidates_models_and_the_judge_a_pseudonymous_person(sessions, tmp_path):
    run_import(sessions, write_jsonl(tmp_path / "arena.jsonl", CONVERSATIONS[:2]), "arena")
    first = stored(sessions)[0]
    assert first["models"] == {"Hello!": "vicuna-13b", "hey": "koala-13b"}
    with sessions.begin() as s:
        judges = s.execute(select(Annotator.name, Annotator.pseudonym, Annotator.kind)).all()
    assert sorted(name for name, _, _ in judges) == ["arena_user_1", "arena_user_2"]
    assert all(kind == "human" and pseudonym and "arena_user" not in pseudonym for _, pseudonym, kind in judges)


@sqlite_only
@pytest.mark.parametrize("rows", [CONVERSATIONS, KAGGLE, ARENA_140K], ids=["conversations", "55k", "140k"])
def test_auto_picks_arena_from_the_columns(sessions, tmp_path, rows):
    summary = run_import(sessions, write_jsonl(tmp_path / "arena.jsonl", rows), "auto")
    assert summary.format == "arena" and summary.rankings > 0


@sqlite_only
def test_the_command_never_prints_a_judge(cli, tmp_path):
    path = write_jsonl(tmp_path / "arena.jsonl", CONVERSATIONS)
    for args in ((), ("--json",)):
        result = cli("import", "dataset", "--format", "arena", path, *args)
        assert "arena_user" not in result.output


def test_the_example_row_gives_its_ranking():
    (got,) = parsed(FORMAT.parse(json.loads(FORMAT.example)))
    assert (got["prompt"], got["tiers"], got["details"]) == (
        "Hi!",
        [["Hello! How can I help?"], ["hi"]],
        {"winner": "model_a"},
    )


def test_a_row_is_told_the_field_of_its_own_shape(sessions, tmp_path):
    no_winner = {k: v for k, v in CONVERSATIONS[0].items() if k != "winner"}
    with pytest.raises(Invalid, match=r"^missing 'winner'$"):
        FORMAT.parse(no_winner)
    with pytest.raises(Invalid, match=r"^missing 'winner'$"):
        FORMAT.parse({k: v for k, v in ARENA_140K[0].items() if k != "winner"})
    with pytest.raises(Invalid, match=r"^missing 'winner_model_a'$"):  # the 55k shape's own field
        FORMAT.parse({k: v for k, v in KAGGLE[0].items() if k != "winner_model_a"})
    summary = run_import(sessions, write_jsonl(tmp_path / "arena.jsonl", [CONVERSATIONS[1], no_winner]), "arena")
    assert (summary.rankings, summary.reasons) == (1, {"missing 'winner'": 1})
