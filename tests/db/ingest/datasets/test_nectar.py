"""nectar: berkeley-nest/Nectar rows become one k-wise ranking by GPT-4 (an AI annotator)."""

import json
from collections import Counter

import pytest

from preflab.db.ingest.datasets.nectar import FORMAT
from preflab.errors import Invalid
from tests.db.ingest.datasets.shapes_a import pair_counts
from tests.db.ingest.datasets.shapes_b import parsed, quarantined, run_import, stored, write_jsonl, write_parquet


def row(prompt, *answers, turns=1):
    return {
        "prompt": prompt,
        "answers": [{"answer": a, "model": m, "rank": r} for a, m, r in answers],
        "turns": turns,
        "num_responses": len(answers),
        "source": ["anthropic-hh"],
        "good_natured": True,
    }


CAT = "\n\nHuman: Give me a word that rhymes with cat.\n\nAssistant: "
ROWS = [
    row(
        CAT,
        ("Hat.", "gpt-4", 1.0),
        ("Bat.", "gpt-3.5-turbo", 2.0),
        ("Mat.", "mistral-7b-instruct", 2.0),
        ("Dog.", "llama-2-7b-chat", 3.0),
    ),
    row(
        "\n\nHuman: Hi\n\nAssistant: Hello! How can I help?\n\nHuman: Tell me a joke.\n\nAssistant: ",
        ("Why did the chicken cross the road?", "gpt-4", 2.0),
        ("Knock knock.", "gpt-3.5-turbo-instruct", 1.0),
        turns=2,
    ),
    row(CAT, ("Hat.", "gpt-4", 1.0)),
    row(CAT, ("Hat.", "gpt-4", 1.0), ("Hat.", "gpt-3.5-turbo", 2.0)),
    row(CAT, ("Hat.", "gpt-4", 1.0), ("Bat.", "gpt-3.5-turbo", None)),
    row("Give me a word.", ("Hat.", "gpt-4", 1.0), ("Bat.", "gpt-3.5-turbo", 2.0)),
    row("\n\nHuman: \n\nAssistant: ", ("Hat.", "gpt-4", 1.0), ("Bat.", "gpt-3.5-turbo", 2.0)),
]
REASONS = {
    "train:2": "fewer than two replies (1)",
    "train:3": "'answers'[0] and 'answers'[1] are identical",
    "train:4": "missing 'rank'",
    "train:5": "'prompt' holds no turns (no '\\n\\nHuman:' or '\\n\\nAssistant:')",
    "train:6": "the prompt[0] (the last user turn) is empty",
}


def test_rows_parse_row_by_row():
    assert parsed(FORMAT.parse(ROWS[0])) == [
        {
            "prompt": "Give me a word that rhymes with cat.",
            "tiers": [["Hat."], ["Bat.", "Mat."], ["Dog."]],
            "models": ["gpt-4", "gpt-3.5-turbo", "mistral-7b-instruct", "llama-2-7b-chat"],
            "scores": None,
            "details": None,
            "annotator": "nectar-gpt-4",
            "kind": "ai",
            "external_id": None,
        }
    ]
    assert parsed(FORMAT.parse(ROWS[1]))[0]["prompt"] == (
        "user: Hi",
        "assistant: Hello! How can I help?",
        "user: Tell me a joke.",
    )
    assert parsed(FORMAT.parse(ROWS[1]))[0]["tiers"] == [["Knock knock."], ["Why did the chicken cross the road?"]]
    for locator, reason in REASONS.items():
        with pytest.raises(Invalid) as caught:
            FORMAT.parse(ROWS[int(locator.split(":")[1])])
        assert str(caught.value) == reason


@pytest.mark.parametrize("writer", [write_jsonl, write_parquet], ids=["jsonl", "parquet"])
def test_import_k_wise_rankings(sessions, tmp_path, writer):
    path = writer(tmp_path / f"rlaif.{'jsonl' if writer is write_jsonl else 'parquet'}", ROWS)
    summary = run_import(sessions, path, "nectar")
    assert (summary.rows, summary.rankings, summary.ties, summary.quarantined) == (7, 2, 0, 5)
    assert quarantined(sessions) == REASONS
    first = stored(sessions)[0]
    assert first["annotator"] == ("ai", "nectar-gpt-4")
    assert first["models"] == {
        "Hat.": "gpt-4",
        "Bat.": "gpt-3.5-turbo",
        "Mat.": "mistral-7b-instruct",
        "Dog.": "llama-2-7b-chat",
    }
    # 4 answers in 3 tiers: every pair across tiers (5), none inside the tie; one from the 2-turn row
    assert pair_counts(sessions) == Counter(
        [
            ("Hat.", "Bat.", 1.0),
            ("Hat.", "Mat.", 1.0),
            ("Hat.", "Dog.", 2.0),
            ("Bat.", "Dog.", 1.0),
            ("Mat.", "Dog.", 1.0),
            ("Knock knock.", "Why did the chicken cross the road?", 1.0),
        ]
    )
    assert run_import(sessions, path, "nectar").duplicates == 2


def test_one_empty_answer_is_quarantined_alone(cli, sessions, tmp_path):
    one_empty = row(CAT, ("Hat.", "gpt-4", 1.0), ("", "llama-2-7b-chat", 2.0), ("Bat.", "gpt-3.5-turbo", 3.0))
    path = write_jsonl(tmp_path / "nectar.jsonl", [one_empty])
    summary = run_import(sessions, path, "nectar")
    assert (summary.rankings, summary.quarantined, summary.quarantined_replies) == (1, 0, 1)
    assert stored(sessions)[0]["tiers"] == [["Hat."], ["Bat."]]
    reason = "'answers'[1] is empty, so the row's other 2 replies were ranked without it"
    assert quarantined(sessions) == {"train:0/'answers'[1]": reason}
    listed = json.loads(cli("quarantine", "list", "--json").stdout)
    assert [(r["source"], r["locator"], r["reason"]) for r in listed] == [
        ("import:nectar", "train:0/'answers'[1]", reason)
    ]
    assert run_import(sessions, path, "nectar").duplicates == 1
    assert len(quarantined(sessions)) == 1
