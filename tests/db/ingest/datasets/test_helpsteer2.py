"""helpsteer2: nvidia/HelpSteer2's rated replies, grouped by prompt, become one ranking per attribute."""

import json

import pytest

from preflab.db.ingest.datasets.helpsteer2 import ATTRIBUTES, FORMAT, prompt_turns
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


def rated(prompt, response, helpfulness, correctness, coherence, complexity, verbosity):
    """One row as the dataset holds it: a reply and its five ratings, 0 to 4."""
    return {
        "prompt": prompt,
        "response": response,
        "helpfulness": helpfulness,
        "correctness": correctness,
        "coherence": coherence,
        "complexity": complexity,
        "verbosity": verbosity,
    }


JOKE = "Hi\n<extra_id_1>Assistant\nHello! How can I help?\n<extra_id_1>User\nTell me a joke."
ROWS = [
    # 0-1: a prompt's two replies, as consecutive rows
    rated("Name a prime number.", "7 is prime.", 4, 4, 4, 1, 1),
    rated("Name a prime number.", "9 is prime.", 1, 0, 4, 1, 1),
    # 2-3: a multi-turn prompt, its earlier turns written into the text
    rated(JOKE, "Why did the chicken cross the road? To get to the other side.", 3, 3, 4, 1, 2),
    rated(JOKE, "No.", 1, 4, 4, 0, 0),
    # 4: one reply alone
    rated("Alone?", "Yes.", 2, 2, 2, 2, 2),
    # 5-6: a rating missing: that attribute gives no ranking, the other four do
    rated("Say hi.", "Hi!", 4, 4, 4, 0, 1),
    rated("Say hi.", "Hello.", 3, None, 4, 0, 1),
    # 7-8: the same reply twice
    rated("Same?", "Same.", 2, 2, 2, 2, 2),
    rated("Same?", "Same.", 3, 3, 3, 3, 3),
]
REASONS = {
    "train:4": "one reply to its prompt, none to rank it against (HelpSteer2 rates two replies a prompt)",
    "train:7": "reply 0 and reply 1 are identical",
    "train:8": "reply 0 and reply 1 are identical",
}
NO_CORRECTNESS = "no correctness ranking: reply 1: missing 'correctness'; the prompt's other criteria are ranked"
JOKE_TURNS = ("user: Hi", "assistant: Hello! How can I help?", "user: Tell me a joke.")


def by_attribute(rows, **options) -> dict[str, dict]:
    records = FORMAT.parse(rows, **options)
    return {r.criterion: got for r, got in zip(records, parsed(records))}


def test_a_prompt_gives_one_ranking_per_attribute_ties_allowed():
    prime = by_attribute(ROWS[0:2], **FORMAT.options)
    assert list(prime) == list(ATTRIBUTES)
    assert prime["helpfulness"] == {
        "prompt": "Name a prime number.",
        "tiers": [["7 is prime."], ["9 is prime."]],
        "models": [None, None],
        "scores": [4.0, 1.0],
        "details": None,
        "annotator": "nvidia/HelpSteer2",
        "kind": "human",
        "external_id": None,
    }
    assert prime["correctness"]["scores"] == [4.0, 0.0]
    assert prime["coherence"]["tiers"] == [["7 is prime.", "9 is prime."]]  # equal ratings: a tie
    joke = by_attribute(ROWS[2:4])
    assert joke["helpfulness"]["prompt"] == JOKE_TURNS
    assert joke["correctness"]["tiers"] == [["No."], ["Why did the chicken cross the road? To get to the other side."]]
    (alone,) = FORMAT.parse(ROWS[2:4], criterion="verbosity")
    assert (alone.criterion, alone.scores) == ("verbosity", [2.0, 0.0])


def test_what_cannot_be_ranked():
    for index, reason in REASONS.items():
        start = int(index.split(":")[1])
        rows = ROWS[4:5] if start == 4 else ROWS[7:9]
        with pytest.raises(Invalid) as caught:
            FORMAT.parse(rows)
        assert str(caught.value) == reason
    hi = FORMAT.parse(ROWS[5:7])
    assert [r.criterion for r in hi] == [a for a in ATTRIBUTES if a != "correctness"]
    assert hi[0].set_aside == [("correctness", ROWS[5:7], NO_CORRECTNESS)]
    with pytest.raises(Invalid, match=r"^reply 1: 'helpfulness' is 5, not one of 0, 1, 2, 3, 4$"):
        FORMAT.parse([ROWS[0], {**ROWS[1], "helpfulness": 5}], criterion="helpfulness")


def test_a_multi_turn_prompt_is_read_as_its_turns():
    assert prompt_turns("c#") == "c#"
    assert prompt_turns(JOKE) == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."},
    ]


WRITERS = [write_jsonl, write_parquet, write_csv]


@pytest.mark.parametrize("writer", WRITERS, ids=["jsonl", "parquet", "csv"])
def test_import_rankings_by_attribute_pairs_quarantine_and_reimport(sessions, tmp_path, writer):
    path = writer(tmp_path / f"helpsteer2.{writer.__name__.removeprefix('write_')}", ROWS)
    summary = run_import(sessions, path, "helpsteer2")
    # the prime's and the joke's five attributes, and the greeting's four; whole ties: the prime's coherence,
    # complexity and verbosity, the joke's coherence, the greeting's coherence, complexity and verbosity
    assert (summary.rows, summary.rankings, summary.ties, summary.quarantined) == (9, 14, 7, 3)
    assert (summary.quarantined_replies, summary.quarantined_criteria) == (0, 1)
    assert summary.criteria == {**dict.fromkeys(ATTRIBUTES, 3), "correctness": 2}
    assert quarantined(sessions) == {**REASONS, "train:5/correctness": NO_CORRECTNESS}
    helpful = stored(sessions, criterion="helpfulness")
    assert [(r["prompt"], r["tiers"], r["annotator"]) for r in helpful] == [
        ("Name a prime number.", [["7 is prime."], ["9 is prime."]], ("human", "nvidia/HelpSteer2")),
        (
            JOKE_TURNS,
            [["Why did the chicken cross the road? To get to the other side."], ["No."]],
            ("human", "nvidia/HelpSteer2"),
        ),
        ("Say hi.", [["Hi!"], ["Hello."]], ("human", "nvidia/HelpSteer2")),
    ]
    chicken = "Why did the chicken cross the road? To get to the other side."
    assert pairs(sessions) == ordered(
        [
            ("7 is prime.", "9 is prime.", 3.0),  # helpfulness
            ("7 is prime.", "9 is prime.", 4.0),  # correctness
            (chicken, "No.", 2.0),  # helpfulness
            ("No.", chicken, 1.0),  # correctness
            (chicken, "No.", 1.0),  # complexity
            (chicken, "No.", 2.0),  # verbosity
            ("Hi!", "Hello.", 1.0),  # helpfulness
        ]
    )
    again = run_import(sessions, path, "helpsteer2")
    assert (again.rankings, again.duplicates, again.quarantined, again.quarantined_criteria) == (0, 14, 3, 1)
    assert len(stored(sessions)) == 14 and len(quarantined(sessions)) == 4


@sqlite_only
def test_one_attribute_auto_and_a_prompt_whose_rows_come_apart(sessions, tmp_path):
    one = run_import(sessions, write_jsonl(tmp_path / "hs2.jsonl", ROWS[:4]), "auto", criterion="correctness")
    assert (one.format, one.rankings, one.criteria) == ("helpsteer2", 2, {"correctness": 2})
    every = run_import(sessions, tmp_path / "hs2.jsonl", "auto")
    assert (every.rankings, every.duplicates) == (8, 2)
    apart = run_import(sessions, write_jsonl(tmp_path / "apart.jsonl", [ROWS[5], ROWS[0], ROWS[6]]), "helpsteer2")
    assert (apart.rankings, apart.quarantined) == (0, 3)
    assert list(apart.reasons) == [
        "the rows of prompt Say hi. are not together; sort the file by prompt (they come in 2 runs)",
        "one reply to its prompt, none to rank it against (HelpSteer2 rates two replies a prompt)",
    ]
    assert apart.notes[0].startswith("1 prompt of ") and "sort the file by prompt" in apart.notes[0]


def test_the_example_gives_its_rankings():
    got = by_attribute([json.loads(line) for line in FORMAT.example.splitlines()])
    assert got["helpfulness"]["tiers"] == [["7 is prime."], ["9 is prime."]]
    assert got["coherence"]["tiers"] == [["7 is prime.", "9 is prime."]]
