"""hh-rlhf: Anthropic/hh-rlhf transcripts become the shared turns (the prompt) and the two last replies."""

from collections import Counter

import pytest

from preflab.db.ingest.datasets.hh import FORMAT, transcript_messages
from preflab.errors import Invalid
from tests.db.ingest.datasets.shapes_a import pair_counts
from tests.db.ingest.datasets.shapes_b import parsed, quarantined, run_import, stored, write_jsonl

Q = "\n\nHuman: What are some good names for a goldfish?\n\nAssistant: How about Goldie or Bubbles?"
ROWS = [
    # 0: one turn each, as most of the harmless-base rows
    {
        "chosen": "\n\nHuman: How do I boil an egg?\n\nAssistant: Simmer it for nine minutes.",
        "rejected": "\n\nHuman: How do I boil an egg?\n\nAssistant: I don't know.",
    },
    # 1: several turns: the prompt is the history up to the last assistant turn
    {
        "chosen": Q + "\n\nHuman: Something less common?\n\nAssistant: Maybe Sunny, for its colour.",
        "rejected": Q + "\n\nHuman: Something less common?\n\nAssistant: Fish.",
    },
    # 2: the sides part before their last turn: each reply is the rest of its conversation
    {
        "chosen": "\n\nHuman: Hi\n\nAssistant: Hello!\n\nHuman: Bye\n\nAssistant: Goodbye!",
        "rejected": "\n\nHuman: Hi\n\nAssistant: What?",
    },
    {"chosen": "\n\nHuman: Same?\n\nAssistant: Same.", "rejected": "\n\nHuman: Same?\n\nAssistant:  Same. "},
    {"chosen": "Just some text.", "rejected": "\n\nHuman: x\n\nAssistant: y"},
    {"chosen": "\n\nHuman: Empty?\n\nAssistant: Yes.", "rejected": "\n\nHuman: Empty?\n\nAssistant:"},
    {"chosen": "\n\nAssistant: I start.", "rejected": "\n\nAssistant: I also start."},
    {"chosen": "\n\nHuman: one", "rejected": "\n\nHuman: two\n\nAssistant: y"},
]
REASONS = {
    "train:3": "'chosen' and 'rejected' are identical",
    "train:4": "'chosen' holds no turns (no '\\n\\nHuman:' or '\\n\\nAssistant:')",
    "train:5": "'rejected' is empty",
    "train:6": "'chosen' and 'rejected' share no prompt (no user turn begins both)",
    "train:7": "'chosen' and 'rejected' share no prompt (no user turn begins both)",
}


def test_transcripts_parse_into_messages():
    assert transcript_messages(Q, "x") == [
        {"role": "user", "content": "What are some good names for a goldfish?"},
        {"role": "assistant", "content": "How about Goldie or Bubbles?"},
    ]
    assert transcript_messages("\n\nHuman: Hi\n\nAssistant: ", "x") == [{"role": "user", "content": "Hi"}]
    assert transcript_messages("Human: Hi", "x") == [{"role": "user", "content": "Hi"}]
    with pytest.raises(Invalid, match="'p' has text before its first turn"):
        transcript_messages("Hello\n\nHuman: Hi", "'p'")


def test_rows_parse_row_by_row():
    assert parsed(FORMAT.parse(ROWS[0])) == [
        {
            "prompt": "How do I boil an egg?",
            "tiers": [["Simmer it for nine minutes."], ["I don't know."]],
            "models": [None, None],
            "scores": None,
            "details": None,
            "annotator": "hh-rlhf",
            "kind": "human",
            "external_id": None,
        }
    ]
    assert parsed(FORMAT.parse(ROWS[1]))[0]["prompt"] == (
        "user: What are some good names for a goldfish?",
        "assistant: How about Goldie or Bubbles?",
        "user: Something less common?",
    )
    assert parsed(FORMAT.parse(ROWS[1]))[0]["tiers"] == [["Maybe Sunny, for its colour."], ["Fish."]]
    assert parsed(FORMAT.parse(ROWS[2]))[0] | {"models": None} == {
        "prompt": "Hi",
        "tiers": [[("assistant: Hello!", "user: Bye", "assistant: Goodbye!")], ["What?"]],
        "models": None,
        "scores": None,
        "details": None,
        "annotator": "hh-rlhf",
        "kind": "human",
        "external_id": None,
    }
    for locator, reason in REASONS.items():
        with pytest.raises(Invalid) as caught:
            FORMAT.parse(ROWS[int(locator.split(":")[1])])
        assert str(caught.value) == reason


def test_import_pairs_quarantine_and_reimport(sessions, tmp_path):
    path = write_jsonl(tmp_path / "harmless-base.jsonl", ROWS)
    summary = run_import(sessions, path, "hh-rlhf")
    assert (summary.rows, summary.rankings, summary.ties, summary.quarantined) == (8, 3, 0, 5)
    assert quarantined(sessions) == REASONS
    rankings = stored(sessions)
    assert [r["annotator"] for r in rankings] == [("human", "hh-rlhf")] * 3
    assert [r["tiers"] for r in rankings] == [
        [["Simmer it for nine minutes."], ["I don't know."]],
        [["Maybe Sunny, for its colour."], ["Fish."]],
        [[("assistant: Hello!", "user: Bye", "assistant: Goodbye!")], ["What?"]],
    ]
    assert pair_counts(sessions) == Counter(
        [
            ("Simmer it for nine minutes.", "I don't know.", 1.0),
            ("Maybe Sunny, for its colour.", "Fish.", 1.0),
            (("assistant: Hello!", "user: Bye", "assistant: Goodbye!"), "What?", 1.0),
        ]
    )

    again = run_import(sessions, path, "hh-rlhf")
    assert (again.rows, again.rankings, again.duplicates, again.quarantined) == (8, 0, 3, 5)
    assert len(stored(sessions)) == 3
