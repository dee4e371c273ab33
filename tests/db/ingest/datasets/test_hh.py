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


def criteria(sessions) -> Counter:
    """The stored rankings' criteria, how many of each."""
    from sqlalchemy import select

    from preflab.db.models import Ranking

    with sessions.begin() as s:
        return Counter(s.scalars(select(Ranking.criterion)))


def test_the_subset_is_named_by_criterion_or_recognised_by_its_name(sessions, tmp_path):
    """Anthropic/hh-rlhf's files say nothing of their subset: --criterion names it, or the file's or folder's name."""
    rows = ROWS[:3]
    plain = run_import(sessions, write_jsonl(tmp_path / "hh.jsonl", rows), "hh-rlhf")
    assert (plain.criteria, plain.assumed_criterion, plain.notes) == ({"overall": 3}, None, [])

    named = run_import(sessions, write_jsonl(tmp_path / "hh.jsonl", rows), "hh-rlhf", criterion="helpfulness")
    assert (named.rankings, named.criteria, named.assumed_criterion) == (3, {"helpfulness": 3}, None)

    folder = tmp_path / "harmless-base"
    folder.mkdir()
    assumed = run_import(sessions, write_jsonl(folder / "train.jsonl", rows), "hh-rlhf")
    assert (assumed.rankings, assumed.criteria) == (3, {"harmlessness": 3})
    assert assumed.assumed_criterion == {
        "criterion": "harmlessness",
        "why": "'harmless-base' is the name of one of hh-rlhf's harmless-* subsets",
        "override": "--criterion overall|helpfulness|harmlessness",
    }
    assert assumed.notes == [
        "assumed the rankings are by harmlessness ('harmless-base' is the name of one of hh-rlhf's harmless-* "
        "subsets); say what they are by with --criterion overall|helpfulness|harmlessness"
    ]
    # the file's own name, and a folder given as the source, are recognised too; --criterion overrides either
    file = run_import(sessions, write_jsonl(tmp_path / "helpful-online.jsonl", rows), "hh-rlhf")
    assert (file.rankings, file.duplicates, file.criteria) == (0, 3, {})  # stored above by --criterion helpfulness
    assert file.assumed_criterion["criterion"] == "helpfulness"
    again = run_import(sessions, folder, "hh-rlhf")
    assert (again.duplicates, again.assumed_criterion["criterion"]) == (3, "harmlessness")
    told = run_import(sessions, folder / "train.jsonl", "hh-rlhf", criterion="overall")
    assert (told.rankings, told.duplicates, told.assumed_criterion) == (0, 3, None)
    assert criteria(sessions) == Counter({"overall": 3, "helpfulness": 3, "harmlessness": 3})
