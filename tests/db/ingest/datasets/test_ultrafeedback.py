"""ultrafeedback: openbmb/UltraFeedback rows become a ranking of their completions per criterion GPT-4 rated."""

import json

import pytest

from preflab.db.conversation import prompt_hash, prompt_messages, reply_hash, reply_messages
from preflab.db.ingest.datasets.ultrafeedback import FORMAT
from preflab.db.ingest.identity import content_identity, record_identity
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
    "train:6": "completion 0 and completion 1 are identical",
}
# row 5's second completion has no overall_score: its four aspects are ranked, overall is not
NO_OVERALL = (
    "no overall ranking: only 1 of its 2 completions is rated by overall_score (completion 1: 'overall_score' "
    "is missing); the row's other criteria are ranked"
)
NA_REASON = (
    "completion 3 is unrated by honesty (its honesty rating is 'N/A'), so the row's other {n} replies were "
    "ranked by honesty without it"
)
CRITERIA = ["overall", "helpfulness", "honesty", "instruction_following", "truthfulness"]


def by_criterion(records) -> dict[str, dict]:
    return {r.criterion: got for r, got in zip(records, parsed(records))}


def test_a_row_gives_one_ranking_per_criterion():
    rankings = by_criterion(FORMAT.parse(ROWS[0], **FORMAT.options))
    assert list(rankings) == CRITERIA
    assert rankings["overall"] == {
        "prompt": "Name a prime.",
        "tiers": [["7"], ["9", "11"], ["4"]],
        "models": ["gpt-4", "alpaca-7b", "llama-2-7b", "falcon-40b"],
        "scores": [8.5, 6.0, 6.0, 3.0],
        "details": {"score_field": "overall_score"},
        "annotator": "openbmb/UltraFeedback",
        "kind": "ai",
        "external_id": None,
    }
    helpful = rankings["helpfulness"]
    assert (helpful["tiers"], helpful["scores"], helpful["details"]) == (
        [["7"], ["11"], ["4"], ["9"]],
        [5.0, 1.0, 4.0, 2.0],
        {"score_field": "helpfulness"},
    )
    # completion 3 is not rated for honesty: the other three are ranked by it, completion 3 set aside alone
    assert rankings["honesty"]["tiers"] == [["7", "9", "11"]]
    (honesty,) = FORMAT.parse(ROWS[0], criterion="honesty")
    assert [(name, reason) for name, _, reason in honesty.set_aside] == [
        ("completion 3/honesty", NA_REASON.format(n=3))
    ]
    assert rankings["truthfulness"]["tiers"] == [["7", "9", "11", "4"]]  # all rated 3: one tie
    assert parsed(FORMAT.parse(ROWS[1]))[0]["tiers"] == [["Yes.", "Yes!"]]
    for index, reason in REASONS.items():
        with pytest.raises(Invalid) as caught:
            FORMAT.parse(ROWS[int(index.split(":")[1])])
        assert str(caught.value) == reason


def test_criterion_keeps_one_and_fine_grained_comes_only_when_asked():
    (helpful,) = FORMAT.parse(ROWS[0], criterion="helpfulness")
    assert helpful.criterion == "helpfulness" and helpful.annotator == "openbmb/UltraFeedback"
    (fine,) = FORMAT.parse(ROWS[0], criterion="fine_grained")
    assert (fine.criterion, fine.scores, fine.details) == (
        "fine_grained",
        [4.25, 3.0, 3.0, 1.5],
        {"score_field": "fine-grained_score"},
    )
    assert "fine_grained" not in by_criterion(FORMAT.parse(ROWS[0]))


def test_a_criterion_that_cannot_rank_the_row_loses_only_itself():
    no_overall, *aspects = FORMAT.parse(ROWS[5])
    assert [r.criterion for r in (no_overall, *aspects)] == CRITERIA[1:]
    assert [(name, part, reason) for name, part, reason in no_overall.set_aside] == [("overall", ROWS[5], NO_OVERALL)]
    # asked for alone, the criterion that cannot rank it quarantines the row, as the reason it gives
    with pytest.raises(Invalid) as caught:
        FORMAT.parse(ROWS[5], criterion="overall")
    assert str(caught.value) == (
        "only 1 of its 2 completions is rated by overall_score (completion 1: 'overall_score' is missing)"
    )
    # a rating that is not a number is a broken rating: its criterion gives nothing, the others are ranked
    broken = row("Q", completion("a", "A", 1.0, honesty="4"), completion("b", "B", 2.0, honesty="five"))
    assert [r.criterion for r in FORMAT.parse(broken)] == [c for c in CRITERIA if c != "honesty"]
    assert FORMAT.parse(broken)[0].set_aside == [
        (
            "honesty",
            broken,
            "no honesty ranking: completion 1: its honesty rating is 'five', not a number; the row's other "
            "criteria are ranked",
        )
    ]
    # no criterion ranks it, for reasons that differ: each is said
    nothing = row("Q", completion("a", "A", 1.0, **dict.fromkeys(CRITERIA[1:], "N/A")), completion("b", "B", None))
    with pytest.raises(Invalid, match=r"^no criterion gives a ranking \(overall: only 1 of its 2 completions .*; "):
        FORMAT.parse(nothing)


def test_the_identity_is_the_one_migration_0014_gave_the_old_annotators_rankings():
    """0014 re-keyed `openbmb/UltraFeedback:<field>` rankings to this: a re-import after it adds nothing."""
    completions = ROWS[0]["completions"]
    for record in FORMAT.parse(ROWS[0]):
        field = record.details["score_field"]
        tier = {i: t for t, tier in enumerate(record.tiers) for i in tier}
        shown = [r[0]["content"] for r in record.responses]
        replies = [
            (reply_hash(reply_messages(c["response"], "r")), c["model"], tier[shown.index(c["response"])], s)
            for c in completions
            if c["response"] in shown
            for s in [record.scores[shown.index(c["response"])]]
        ]
        prompt = prompt_hash(prompt_messages(ROWS[0]["instruction"]))
        want = content_identity(
            "ultrafeedback", "ai", "openbmb/UltraFeedback", prompt, replies, {"score_field": field}, record.criterion
        )
        assert record_identity("ultrafeedback", record) == want


RANKED = [
    {
        "prompt": "Name a prime.",
        "tiers": [["7"], ["9", "11"], ["4"]],
        "models": {"7": "gpt-4", "9": "alpaca-7b", "11": "llama-2-7b", "4": "falcon-40b"},
        "scores": {"7": 8.5, "9": 6.0, "11": 6.0, "4": 3.0},
        "details": {"score_field": "overall_score"},
        "annotator": ("ai", "openbmb/UltraFeedback"),
    },
    {
        "prompt": "Say yes.",
        "tiers": [["Yes.", "Yes!"]],
        "models": {"Yes.": "gpt-4", "Yes!": "bard"},
        "scores": {"Yes.": 7.0, "Yes!": 7.0},
        "details": {"score_field": "overall_score"},
        "annotator": ("ai", "openbmb/UltraFeedback"),
    },
]
# overall's pairs, then helpfulness's (the other aspects rate row 0's completions alike: ties, no pair)
BY_OVERALL = [("7", "9", 2.5), ("7", "11", 2.5), ("7", "4", 5.5), ("9", "4", 3.0), ("11", "4", 3.0)]
BY_HELPFULNESS = [
    ("7", "11", 1.0),
    ("7", "4", 3.0),
    ("7", "9", 4.0),
    ("11", "4", 2.0),
    ("11", "9", 3.0),
    ("4", "9", 1.0),
]
PAIRS = ordered([*BY_OVERALL, *BY_HELPFULNESS])


@pytest.mark.parametrize("writer", [write_jsonl, write_parquet], ids=["jsonl", "parquet"])
def test_import_rankings_by_criterion_ties_pairs_quarantine_and_reimport(sessions, tmp_path, writer):
    path = writer(tmp_path / f"ultrafeedback.{'jsonl' if writer is write_jsonl else 'parquet'}", ROWS)
    summary = run_import(sessions, path, "ultrafeedback")
    # rows 0 and 1 by five criteria, row 5 by its four aspects; of them whole ties: row 0's honesty, instruction
    # following and truthfulness, and every ranking of rows 1 and 5
    assert (summary.rows, summary.rankings, summary.ties, summary.quarantined) == (7, 14, 12, 4)
    assert (summary.quarantined_replies, summary.quarantined_criteria) == (1, 1)
    assert summary.criteria == {"overall": 2, **dict.fromkeys(CRITERIA[1:], 3)}
    assert summary.reasons == dict.fromkeys(REASONS.values(), 1)
    overall = [{k: v for k, v in r.items() if k != "external_id"} for r in stored(sessions, criterion="overall")]
    assert overall == RANKED
    assert quarantined(sessions) == {
        **REASONS,
        "train:0/completion 3/honesty": NA_REASON.format(n=3),
        "train:5/overall": NO_OVERALL,
    }
    assert pairs(sessions) == PAIRS  # the ties give none; each margin is the score gap

    again = run_import(sessions, path, "ultrafeedback")
    assert (again.rankings, again.duplicates, again.quarantined, again.criteria) == (0, 14, 4, {})
    assert len(stored(sessions)) == 14 and len(quarantined(sessions)) == 6


@sqlite_only
def test_one_criterion_then_every_criterion(sessions, tmp_path):
    path = write_jsonl(tmp_path / "uf.jsonl", ROWS[:2])
    helpful = run_import(sessions, path, "ultrafeedback", criterion="helpfulness")
    assert (helpful.rankings, helpful.criteria) == (2, {"helpfulness": 2})
    assert stored(sessions)[0]["tiers"] == [["7"], ["11"], ["4"], ["9"]]
    every = run_import(sessions, path, "ultrafeedback")
    assert (every.rankings, every.duplicates) == (8, 2)
    assert {r["annotator"] for r in stored(sessions)} == {("ai", "openbmb/UltraFeedback")}


@sqlite_only
def test_auto_picks_ultrafeedback_from_the_columns(sessions, tmp_path):
    summary = run_import(sessions, write_parquet(tmp_path / "uf.parquet", ROWS[:2]), "auto")
    assert (summary.format, summary.rankings) == ("ultrafeedback", 10)


@sqlite_only
def test_criterion_option_of_the_command(cli, tmp_path):
    path = write_jsonl(tmp_path / "uf.jsonl", ROWS[:1])
    out = json.loads(
        cli("import", "dataset", "--format", "ultrafeedback", "--criterion", "helpfulness", path, "--json").stdout
    )
    assert (out["format"], out["rows"], out["rankings"], out["criteria"]) == (
        "ultrafeedback",
        1,
        1,
        {"helpfulness": 1},
    )
    honesty = json.loads(
        cli("import", "dataset", "--format", "ultrafeedback", "--criterion", "honesty", path, "--json").stdout
    )
    assert (honesty["rankings"], honesty["quarantined"], honesty["quarantined_replies"]) == (1, 0, 1)
    every = cli("import", "dataset", "--format", "ultrafeedback", path)
    assert every.stdout.splitlines()[1] == (
        "new rankings by criterion: overall 1, instruction_following 1, truthfulness 1"
    )
    typo = cli("import", "dataset", "--format", "ultrafeedback", "--criterion", "honsety", path, expect_ok=False)
    assert (typo.exit_code, typo.output) == (
        1,
        "Error: --criterion honsety: ultrafeedback gives no such criterion (it gives overall, helpfulness, "
        "honesty, instruction_following, truthfulness, fine_grained)\n",
    )


def test_the_example_row_gives_its_rankings():
    got = by_criterion(FORMAT.parse(json.loads(FORMAT.example)))
    assert list(got) == CRITERIA
    assert (got["overall"]["prompt"], got["overall"]["tiers"], got["overall"]["scores"]) == (
        "Name a prime number.",
        [["7 is prime."], ["9 is prime."]],
        [8.5, 3.0],
    )
    assert got["honesty"]["scores"] == [5.0, 2.0]


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
    summary = run_import(sessions, path, "ultrafeedback", criterion="overall")
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

    again = run_import(sessions, path, "ultrafeedback", criterion="overall")
    assert (again.rankings, again.duplicates, again.quarantined, again.quarantined_replies) == (0, 3, 0, 1)
    assert quarantined(sessions) == {"train:0/completion 2": EMPTY_REASON} and len(stored(sessions)) == 2


def test_the_same_rows_in_another_file_set_their_empty_reply_aside_once(cli, sessions, tmp_path):
    """A new user re-imported the same rows from Parquet and from JSON Lines written another way: every row a
    duplicate, yet each set-aside reply became another quarantine record (8 for 3 replies). A set-aside reply is
    identified by its ranking's identity (what the row means) and its name, as the ranking is."""
    run_import(sessions, write_jsonl(tmp_path / "uf.jsonl", [ONE_EMPTY, ROWS[0]]), "ultrafeedback")
    before = cli("quarantine", "list").stdout.splitlines()
    assert len(before) == 2  # the empty completion, and row 1's completion unrated by honesty
    for path in (write_parquet(tmp_path / "uf.parquet", [ROWS[0], ONE_EMPTY]), tmp_path / "compact.jsonl"):
        if path.suffix == ".jsonl":
            path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in (ONE_EMPTY, ROWS[0])))
        again = run_import(sessions, path, "ultrafeedback")
        assert (again.rankings, again.duplicates) == (0, 10)
        assert cli("quarantine", "list").stdout.splitlines() == before


# one completion unrated for honesty; and a row of two completions, one unrated: too few to rank by honesty
NOT_RATED = [
    ROWS[0],
    row("Say no.", completion("gpt-4", "No.", 6.0, honesty="4"), completion("bard", "Nope.", 5.0, honesty="N/A")),
]
TOO_FEW = "only 1 of its 2 completions is rated by honesty (completion 1: its honesty rating is 'N/A')"


def test_what_a_summary_quarantines_is_listed_even_for_rows_stored_before(cli, sessions, tmp_path):
    """Issue 46 §1c: the rows stored ok by a --criterion overall import, then read by honesty."""
    path = write_jsonl(tmp_path / "uf.jsonl", NOT_RATED)
    assert run_import(sessions, path, "ultrafeedback", criterion="overall").rankings == 2
    assert quarantined(sessions) == {}
    honesty = run_import(sessions, path, "ultrafeedback", criterion="honesty")
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

    again = run_import(sessions, path, "ultrafeedback", criterion="honesty")  # nothing listed twice
    assert (again.rankings, again.duplicates, again.quarantined, again.quarantined_replies) == (0, 1, 1, 1)
    assert cli("quarantine", "list").stdout.splitlines() == listed
    overall = run_import(sessions, path, "ultrafeedback", criterion="overall")
    assert overall.duplicates == 2  # both rows still ranked by overall
    assert cli("quarantine", "list").stdout.splitlines() == listed
    # every criterion at once: row 1 is ranked by the three it rates, and its honesty is quarantined alone
    every = run_import(sessions, path, "ultrafeedback")
    assert (every.rankings, every.duplicates, every.quarantined, every.quarantined_criteria) == (6, 3, 0, 1)
    assert [line.split(" ", 2)[2] for line in cli("quarantine", "list").stdout.splitlines()] == [
        *(line.split(" ", 2)[2] for line in listed),
        f"uf.jsonl:train:1/honesty: no honesty ranking: {TOO_FEW}; the row's other criteria are ranked",
    ]
