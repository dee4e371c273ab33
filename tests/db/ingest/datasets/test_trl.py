"""trl: TRL preference rows, standard or conversational, explicit or implicit prompt; ultrafeedback_binarized."""

import pytest

from preflab.db.ingest.datasets.trl import ASSUMED, BINARIZED, FORMAT
from preflab.errors import Invalid
from tests.db.ingest.datasets.shapes_a import pair_counts
from tests.db.ingest.datasets.shapes_b import parsed, quarantined, run_import, stored, write_jsonl, write_parquet


def user(text):
    return {"role": "user", "content": text}


def bot(text):
    return {"role": "assistant", "content": text}


SKY = [user("What color is the sky?")]
ROWS = [
    # 0: standard, explicit prompt (TRL's docs)
    {"prompt": "The sky is", "chosen": " blue.", "rejected": " green."},
    # 1: conversational, explicit prompt
    {"prompt": SKY, "chosen": [bot("It is blue.")], "rejected": [bot("It is green.")]},
    # 2: conversational, implicit prompt: whole conversations
    {
        "chosen": [{"role": "system", "content": "Be brief."}, *SKY, bot("Blue.")],
        "rejected": [{"role": "system", "content": "Be brief."}, *SKY, bot("Green.")],
    },
    # 3: HuggingFaceH4/ultrafeedback_binarized: a prompt string beside whole conversations, and scores
    {
        "prompt": "Name a prime.",
        "prompt_id": "5a1f",
        "chosen": [user("Name a prime."), bot("7")],
        "rejected": [user("Name a prime."), bot("9")],
        "messages": [user("Name a prime."), bot("7")],
        "score_chosen": 8.5,
        "score_rejected": 3.0,
    },
    # 4: a later turn is where they part: the prompt is the shared history
    {
        "chosen": [user("Hi"), bot("Hello"), user("Joke?"), bot("Knock knock.")],
        "rejected": [user("Hi"), bot("Hello"), user("Joke?"), bot("No.")],
    },
    {"chosen": "The sky is blue.", "rejected": "The sky is green."},
    {"chosen": [user("A?"), bot("a")], "rejected": [user("B?"), bot("b")]},
    {
        "prompt": "Name a prime.",
        "chosen": [user("Name an even prime."), bot("2")],
        "rejected": [user("Name an even prime."), bot("4")],
    },
    {"prompt": "p", "chosen": [bot("same")], "rejected": [bot("same")]},
    {"prompt": "p", "chosen": [user("p"), bot("x")], "rejected": "y"},
    {"prompt": "p", "chosen": "x", "rejected": "y", "score_chosen": "high", "score_rejected": 1},
    {"prompt": [bot("I go first")], "chosen": "x", "rejected": "y"},
]
REASONS = {
    "train:5": "'chosen' and 'rejected' are replies without a 'prompt' (an implicit prompt needs whole "
    "conversations: lists of messages)",
    "train:6": "'chosen' and 'rejected' share no prompt (no user turn begins both)",
    "train:7": "'prompt' is not the last user turn of the conversation 'chosen' and 'rejected' share",
    "train:8": "'chosen' and 'rejected' are identical",
    "train:9": "one of 'chosen' and 'rejected' is a whole conversation and the other is not",
    "train:10": "'score_chosen' must be a finite number, not 'high'",
    "train:11": "'prompt' ends with an assistant turn; a prompt ends with the user's message",
}


def test_rows_parse_row_by_row():
    got = [parsed(FORMAT.parse(row))[0] for row in ROWS[:5]]
    assert [(r["prompt"], r["tiers"], r["scores"]) for r in got] == [
        ("The sky is", [[" blue."], [" green."]], None),
        ("What color is the sky?", [["It is blue."], ["It is green."]], None),
        (("system: Be brief.", "user: What color is the sky?"), [["Blue."], ["Green."]], None),
        ("Name a prime.", [["7"], ["9"]], [8.5, 3.0]),
        (("user: Hi", "assistant: Hello", "user: Joke?"), [["Knock knock."], ["No."]], None),
    ]
    assert [(r["annotator"], r["kind"]) for r in got] == [("trl", "human")] * 3 + [
        ("HuggingFaceH4/ultrafeedback_binarized", "ai"),
        ("trl", "human"),
    ]  # row 3 has GPT-4's scores
    for locator, reason in REASONS.items():
        with pytest.raises(Invalid) as caught:
            FORMAT.parse(ROWS[int(locator.split(":")[1])])
        assert str(caught.value) == reason


@pytest.mark.parametrize("writer", [write_jsonl, write_parquet], ids=["jsonl", "parquet"])
def test_import_keeps_scores_and_quarantines_the_rest(sessions, tmp_path, writer):
    # a parquet column holds one type: the whole-conversation rows, as ultrafeedback_binarized's files hold
    rows = [ROWS[3], ROWS[2], ROWS[4]] if writer is write_parquet else ROWS  # the first row names the columns
    path = writer(tmp_path / f"prefs.{'jsonl' if writer is write_jsonl else 'parquet'}", rows)
    summary = run_import(sessions, path, "trl")
    bad = {} if writer is write_parquet else REASONS
    assert (summary.rows, summary.rankings, summary.ties, summary.quarantined) == (
        len(rows),
        len(rows) - len(bad),
        0,
        len(bad),
    )
    assert quarantined(sessions) == bad
    prime = next(r for r in stored(sessions) if r["prompt"] == "Name a prime.")
    assert prime["scores"] == {"7": 8.5, "9": 3.0} and prime["annotator"] == ("ai", BINARIZED)
    made = pair_counts(sessions)
    assert made[("7", "9", 5.5)] == 1  # the score gap is the margin
    assert sum(made.values()) == summary.rankings

    again = run_import(sessions, path, "trl")
    assert (again.rankings, again.duplicates, again.quarantined) == (0, summary.rankings, len(bad))
    assert pair_counts(sessions) == made


def binarized(prompt, chosen, rejected, score_chosen, score_rejected, prompt_id):
    """A HuggingFaceH4/ultrafeedback_binarized row (train_prefs), all seven of its columns."""
    convo = [user(prompt)]
    return {
        "prompt": prompt,
        "prompt_id": prompt_id,
        "chosen": [*convo, bot(chosen)],
        "rejected": [*convo, bot(rejected)],
        "messages": [*convo, bot(chosen)],
        "score_chosen": score_chosen,
        "score_rejected": score_rejected,
    }


BINARIZED_ROWS = [
    binarized("Name a prime.", "7", "9", 8.5, 3.0, "5a1f"),
    binarized("Say yes.", "Yes.", "Yes!", 7.0, 7.0, "77c2"),
]  # equal scores: a tie


def test_the_ultrafeedback_binarized_shape_is_gpt_4s_and_equal_scores_tie(sessions, tmp_path):
    path = write_parquet(tmp_path / "train_prefs-00000-of-00001.parquet", BINARIZED_ROWS)
    summary = run_import(sessions, path, "auto")
    assert (summary.format, summary.rankings, summary.ties) == ("trl", 2, 1)
    assert summary.assumed == {
        BINARIZED: {
            "annotator_kind": "ai",
            "rankings": 2,
            "why": ASSUMED[BINARIZED],
            "override": "--annotator NAME --annotator-kind human|ai",
        }
    }
    assert [(r["tiers"], r["annotator"]) for r in stored(sessions)] == [
        ([["7"], ["9"]], ("ai", BINARIZED)),
        ([["Yes.", "Yes!"]], ("ai", BINARIZED)),
    ]
    assert pair_counts(sessions) == {("7", "9", 5.5): 1}  # the tie gives no pair, not a win with margin 0


def test_annotator_and_kind_override_what_the_format_assumes(sessions, tmp_path):
    plain = run_import(sessions, write_jsonl(tmp_path / "plain.jsonl", ROWS[:3]), "trl")
    assert plain.assumed == {
        "trl": {
            "annotator_kind": "human",
            "rankings": 3,
            "why": ASSUMED["trl"],
            "override": "--annotator NAME --annotator-kind human|ai",
        }
    }
    path = write_jsonl(tmp_path / "binarized.jsonl", BINARIZED_ROWS)
    said = run_import(sessions, path, "trl", annotator="our-raters", annotator_kind="human")
    assert (said.rankings, said.assumed) == (2, {})
    # the name alone leaves the kind assumed, and says so under the name given
    named = run_import(sessions, path, "trl", annotator="uf-gpt-4")
    assert (named.rankings, named.assumed["uf-gpt-4"]["annotator_kind"]) == (2, "ai")
    assert [r["annotator"] for r in stored(sessions)] == [("human", "trl")] * 3 + [("human", "our-raters")] * 2 + [
        ("ai", "uf-gpt-4")
    ] * 2
