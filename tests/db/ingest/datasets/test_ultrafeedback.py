"""ultrafeedback: openbmb/UltraFeedback rows become one ranking of their completions by GPT-4's scores."""

import json

import pytest

from preflab.db.ingest.datasets.ultrafeedback import FORMAT
from preflab.errors import EXIT_ALL_QUARANTINED, Invalid
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


def completion(model, response, overall, fine=None, **ratings):
    """One completion as the dataset holds it (ratings are strings there: "4", "N/A")."""
    aspects = {"helpfulness": "3", "honesty": "3", "instruction_following": "3", "truthfulness": "3", **ratings}
    annotations = {name: {"Rating": rating, "Rationale": f"{name} is {rating}."} for name, rating in aspects.items()}
    annotations["helpfulness"].update({"Rationale For Rating": "Informative.", "Type": ["1", "2"]})
    return {
        "annotations": annotations,
        "critique": "Fine.",
        "custom_system_prompt": "Be helpful.",
        "fine-grained_score": fine if fine is not None or overall is None else overall / 2,
        "model": model,
        "overall_score": overall,
        "principle": "helpfulness",
        "response": response,
    }


def row(instruction, *completions, source="evol_instruct"):
    return {
        "source": source,
        "instruction": instruction,
        "models": [c["model"] for c in completions],
        "completions": list(completions),
        "correct_answers": ["None"],
        "incorrect_answers": ["None"],
    }


ROWS = [
    # 0: four completions, two of them scored alike (a tie inside the ranking)
    row(
        "Name a prime.",
        completion("gpt-4", "7", 8.5, helpfulness="5"),
        completion("alpaca-7b", "9", 6.0, helpfulness="1"),
        completion("llama-2-7b", "11", 6.0, helpfulness="4"),
        completion("falcon-40b", "4", 3.0, helpfulness="2", honesty="N/A"),
    ),
    # 1: equal scores only: one tier, a tie
    row("Say yes.", completion("gpt-4", "Yes.", 7.0), completion("bard", "Yes!", 7.0)),
    row("One only.", completion("gpt-4", "Alone.", 9.0)),
    row("None at all."),
    row("Empty reply.", completion("gpt-4", "Full.", 8.0), completion("bard", "", 2.0)),
    row("No score.", completion("gpt-4", "A.", 8.0), completion("bard", "B.", None)),
    row("Same twice.", completion("gpt-4", "Same.", 8.0), completion("bard", "Same.", 2.0)),
]
REASONS = {
    "train:2": "fewer than two completions (1)",
    "train:3": "fewer than two completions (0)",
    "train:4": "completion 1 is not a non-empty string",
    "train:5": "only 1 of its 2 completions is rated by overall_score (completion 1: 'overall_score' is missing)",
    "train:6": "completion 0 and completion 1 are identical",
}


def test_parse_ranks_completions_by_overall_score_row_by_row():
    assert parsed(FORMAT.parse(ROWS[0], **FORMAT.options)) == [
        {
            "prompt": "Name a prime.",
            "tiers": [["7"], ["9", "11"], ["4"]],
            "models": ["gpt-4", "alpaca-7b", "llama-2-7b", "falcon-40b"],
            "scores": [8.5, 6.0, 6.0, 3.0],
            "details": {"score_field": "overall_score"},
            "annotator": "openbmb/UltraFeedback:overall_score",
            "kind": "ai",
            "external_id": None,
        }
    ]
    assert parsed(FORMAT.parse(ROWS[1]))[0]["tiers"] == [["Yes.", "Yes!"]]
    for index, reason in REASONS.items():
        with pytest.raises(Invalid) as caught:
            FORMAT.parse(ROWS[int(index.split(":")[1])])
        assert str(caught.value) == reason


def test_score_field_ranks_by_another_number():
    by_help = parsed(FORMAT.parse(ROWS[0], score_field="helpfulness"))[0]
    assert by_help["tiers"] == [["7"], ["11"], ["4"], ["9"]] and by_help["scores"] == [5.0, 1.0, 4.0, 2.0]
    assert by_help["annotator"] == "openbmb/UltraFeedback:helpfulness"
    assert by_help["details"] == {"score_field": "helpfulness"}
    assert parsed(FORMAT.parse(ROWS[0], score_field="fine-grained_score"))[0]["scores"] == [4.25, 3.0, 3.0, 1.5]
    # completion 3 is not rated for honesty: the other three are ranked by it, completion 3 set aside alone
    (by_honesty,) = FORMAT.parse(ROWS[0], score_field="honesty")
    assert parsed([by_honesty])[0]["tiers"] == [["7", "9", "11"]]
    assert [(name, reason) for name, _, reason in by_honesty.set_aside] == [
        ("completion 3/honesty", NA_REASON.format(n=3))
    ]
    with pytest.raises(Invalid, match=r"^completion 1: its honesty rating is 'five', not a number$"):
        FORMAT.parse(
            row("Q", completion("a", "A", 1.0, honesty="4"), completion("b", "B", 2.0, honesty="five")),
            score_field="honesty",
        )
    with pytest.raises(
        Invalid,
        match=r"^completion 0: no score 'helpfulnes' \(a number of the completion, "
        r"or an aspect of its annotations: helpfulness, honesty, ",
    ):
        FORMAT.parse(ROWS[0], score_field="helpfulnes")
    with pytest.raises(Invalid, match=r"^completion 0: 'response' must be a finite number, not '7'$"):
        FORMAT.parse(ROWS[0], score_field="response")


NA_REASON = (
    "completion 3 is unrated by honesty (its honesty rating is 'N/A'), so the row's other {n} replies were "
    "ranked by honesty without it"
)

RANKED = [
    {
        "prompt": "Name a prime.",
        "tiers": [["7"], ["9", "11"], ["4"]],
        "models": {"7": "gpt-4", "9": "alpaca-7b", "11": "llama-2-7b", "4": "falcon-40b"},
        "scores": {"7": 8.5, "9": 6.0, "11": 6.0, "4": 3.0},
        "details": {"score_field": "overall_score"},
        "annotator": ("ai", "openbmb/UltraFeedback:overall_score"),
    },
    {
        "prompt": "Say yes.",
        "tiers": [["Yes.", "Yes!"]],
        "models": {"Yes.": "gpt-4", "Yes!": "bard"},
        "scores": {"Yes.": 7.0, "Yes!": 7.0},
        "details": {"score_field": "overall_score"},
        "annotator": ("ai", "openbmb/UltraFeedback:overall_score"),
    },
]
PAIRS = ordered([("7", "9", 2.5), ("7", "11", 2.5), ("7", "4", 5.5), ("9", "4", 3.0), ("11", "4", 3.0)])


@pytest.mark.parametrize("writer", [write_jsonl, write_parquet], ids=["jsonl", "parquet"])
def test_import_rankings_ties_pairs_quarantine_and_reimport(sessions, tmp_path, writer):
    path = writer(tmp_path / f"ultrafeedback.{'jsonl' if writer is write_jsonl else 'parquet'}", ROWS)
    summary = run_import(sessions, path, "ultrafeedback")
    assert (summary.rows, summary.rankings, summary.ties, summary.quarantined) == (7, 2, 1, 5)
    assert summary.reasons == dict.fromkeys(REASONS.values(), 1)
    assert [{k: v for k, v in r.items() if k != "external_id"} for r in stored(sessions)] == RANKED
    assert quarantined(sessions) == REASONS
    assert pairs(sessions) == PAIRS  # the tie gives none; each margin is the score gap

    again = run_import(sessions, path, "ultrafeedback")
    assert (again.rankings, again.duplicates, again.quarantined) == (0, 2, 5)
    assert len(stored(sessions)) == 2


@sqlite_only
def test_rankings_by_another_field_are_other_rankings(sessions, tmp_path):
    path = write_jsonl(tmp_path / "uf.jsonl", ROWS[:2])
    assert run_import(sessions, path, "ultrafeedback").rankings == 2
    by_help = run_import(sessions, path, "ultrafeedback", score_field="helpfulness")
    assert (by_help.rankings, by_help.duplicates) == (2, 0)
    assert [r["annotator"][1] for r in stored(sessions)] == ["openbmb/UltraFeedback:overall_score"] * 2 + [
        "openbmb/UltraFeedback:helpfulness"
    ] * 2
    assert stored(sessions)[2]["tiers"] == [["7"], ["11"], ["4"], ["9"]]


@sqlite_only
def test_auto_picks_ultrafeedback_from_the_columns(sessions, tmp_path):
    summary = run_import(sessions, write_parquet(tmp_path / "uf.parquet", ROWS[:2]), "auto")
    assert (summary.format, summary.rankings) == ("ultrafeedback", 2)


@sqlite_only
def test_score_field_option_of_the_command(cli, tmp_path):
    path = write_jsonl(tmp_path / "uf.jsonl", ROWS[:1])
    out = json.loads(
        cli("import", "dataset", "--format", "ultrafeedback", "--score-field", "helpfulness", path, "--json").stdout
    )
    assert (out["format"], out["rows"], out["rankings"]) == ("ultrafeedback", 1, 1)
    honesty = json.loads(
        cli("import", "dataset", "--format", "ultrafeedback", "--score-field", "honesty", path, "--json").stdout
    )
    assert (honesty["rankings"], honesty["quarantined"], honesty["quarantined_replies"]) == (1, 0, 1)
    typo = cli(
        "import", "dataset", "--format", "ultrafeedback", "--score-field", "honsety", path, "--json", expect_ok=False
    )
    assert typo.exit_code == EXIT_ALL_QUARANTINED
    assert list(json.loads(typo.stdout)["reasons"]) == [
        "completion 0: no score 'honsety' (a number of the completion, or an aspect of its annotations: "
        "helpfulness, honesty, instruction_following, truthfulness)"
    ]


def test_the_example_row_gives_its_ranking():
    (got,) = parsed(FORMAT.parse(json.loads(FORMAT.example)))
    assert (got["prompt"], got["tiers"], got["scores"]) == (
        "Name a prime number.",
        [["7 is prime."], ["9 is prime."]],
        [8.5, 3.0],
    )


# four completions, one of them empty: the other three are the ranking, the empty one quarantined alone
ONE_EMPTY = row(
    "Name a colour.",
    completion("gpt-4", "Blue.", 8.0),
    completion("bard", "Red.", 6.0),
    completion("alpaca-7b", "", 2.0),
    completion("falcon-40b", "Green.", 4.0),
)
EMPTY_REASON = "completion 2 is empty, so the row's other 3 replies were ranked without it"


def test_one_empty_completion_is_quarantined_alone(cli, sessions, tmp_path):
    # the same row twice, as a file joined from two exports holds it
    path = write_jsonl(tmp_path / "uf.jsonl", [ONE_EMPTY, ROWS[0], ONE_EMPTY])
    summary = run_import(sessions, path, "ultrafeedback")
    assert (summary.rows, summary.rankings, summary.duplicates, summary.quarantined, summary.quarantined_replies) == (
        3,
        2,
        1,
        0,
        1,
    )
    colour = stored(sessions)[0]
    assert (colour["tiers"], colour["models"]) == (
        [["Blue."], ["Red."], ["Green."]],
        {"Blue.": "gpt-4", "Red.": "bard", "Green.": "falcon-40b"},
    )
    assert quarantined(sessions) == {"train:0/completion 2": EMPTY_REASON}
    listed = cli("quarantine", "list").stdout.splitlines()
    assert len(listed) == 1
    assert listed[0].endswith(f" import:ultrafeedback uf.jsonl:train:0/completion 2: {EMPTY_REASON}")
    shown_json = json.loads(cli("quarantine", "show", listed[0].split()[0][1:], "--json").stdout)
    assert json.loads(shown_json["payload"])["model"] == "alpaca-7b"  # the completion as the row held it

    again = run_import(sessions, path, "ultrafeedback")
    assert (again.rankings, again.duplicates, again.quarantined, again.quarantined_replies) == (0, 3, 0, 1)
    assert quarantined(sessions) == {"train:0/completion 2": EMPTY_REASON} and len(stored(sessions)) == 2


def test_the_same_rows_in_another_file_set_their_empty_reply_aside_once(cli, sessions, tmp_path):
    """A new user re-imported the same rows from Parquet and from JSON Lines written another way: every row a
    duplicate, yet each set-aside reply became another quarantine record (8 for 3 replies). A set-aside reply is
    identified by its ranking's identity (what the row means) and its name, as the ranking is."""
    run_import(sessions, write_jsonl(tmp_path / "uf.jsonl", [ONE_EMPTY, ROWS[0]]), "ultrafeedback")
    before = cli("quarantine", "list").stdout.splitlines()
    assert len(before) == 1
    for path in (write_parquet(tmp_path / "uf.parquet", [ROWS[0], ONE_EMPTY]), tmp_path / "compact.jsonl"):
        if path.suffix == ".jsonl":
            path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in (ONE_EMPTY, ROWS[0])))
        again = run_import(sessions, path, "ultrafeedback")
        assert (again.rankings, again.duplicates) == (0, 2)
        assert cli("quarantine", "list").stdout.splitlines() == before


# one completion unrated for honesty; and a row of two completions, one unrated: too few to rank by honesty
NOT_RATED = [
    ROWS[0],
    row("Say no.", completion("gpt-4", "No.", 6.0, honesty="4"), completion("bard", "Nope.", 5.0, honesty="N/A")),
]
TOO_FEW = "only 1 of its 2 completions is rated by honesty (completion 1: its honesty rating is 'N/A')"


def test_what_a_summary_quarantines_is_listed_even_for_rows_stored_before(cli, sessions, tmp_path):
    """Issue 46 §1c: the rows stored ok by an --score-field overall_score import, then read by honesty."""
    path = write_jsonl(tmp_path / "uf.jsonl", NOT_RATED)
    assert run_import(sessions, path, "ultrafeedback").rankings == 2
    assert quarantined(sessions) == {}
    honesty = run_import(sessions, path, "ultrafeedback", score_field="honesty")
    assert (honesty.rankings, honesty.quarantined, honesty.quarantined_replies) == (1, 1, 1)
    assert honesty.reasons == {TOO_FEW: 1}
    listed = cli("quarantine", "list").stdout.splitlines()
    assert [line.split(" ", 2)[2] for line in listed] == [
        f"uf.jsonl:train:0/completion 3/honesty: {NA_REASON.format(n=3)}",
        f"uf.jsonl:train:1: {TOO_FEW}",
    ]
    first = cli("quarantine", "list", "--limit", 1)  # never silently fewer than there are
    assert first.stdout.splitlines() == listed[:1] and "there are more" in first.stderr
    # the row's own record is still the one the first import used; what this import said is a record of its own
    shown_json = json.loads(cli("quarantine", "show", listed[1].split()[0][1:], "--json").stdout)
    assert json.loads(shown_json["payload"]) == NOT_RATED[1]

    again = run_import(sessions, path, "ultrafeedback", score_field="honesty")  # nothing listed twice
    assert (again.rankings, again.duplicates, again.quarantined, again.quarantined_replies) == (0, 1, 1, 1)
    assert cli("quarantine", "list").stdout.splitlines() == listed
    assert run_import(sessions, path, "ultrafeedback").duplicates == 2  # overall_score: both rows still ranked
    assert cli("quarantine", "list").stdout.splitlines() == listed
