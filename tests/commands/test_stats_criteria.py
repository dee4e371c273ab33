"""`stats`, `stats --judges`, `annotators` and `leaderboard` on a store of two criteria: one block each, or
`--criterion`'s alone, never a mixture (SQLite and Postgres).

Alice and a judge say the first reply is the most helpful and the least harmless; Bob agrees with Alice on
helpfulness. Mixed, Alice would contradict herself and the judge would disagree with the people on every
pair; within each criterion everyone agrees.
"""

from __future__ import annotations

import json

import pytest

from tests.db.helpers import ranking_line, write_lines

PROMPTS = 6
MODELS = ["model-a", "model-b", "model-c"]
FIRST_BEST, LAST_BEST = [[0], [1], [2]], [[2], [1], [0]]


@pytest.fixture
def two_criteria(cli, tmp_path):
    lines = []
    for p in range(PROMPTS):
        replies = [f"reply of {m} to question {p}" for m in MODELS]
        for who, kind, criterion, tiers in (
            ("alice", "human", "helpfulness", FIRST_BEST),
            ("alice", "human", "harmlessness", LAST_BEST),
            ("bob", "human", "helpfulness", FIRST_BEST),
            ("judge", "ai", "helpfulness", FIRST_BEST),
            ("judge", "ai", "harmlessness", LAST_BEST),
        ):
            lines.append(
                ranking_line(f"question {p}", replies, tiers, who, kind, id=f"{p}", model=MODELS, criterion=criterion)
            )
    cli("import", "rankings", write_lines(tmp_path / "rankings.jsonl", lines))


def test_stats_gives_each_criterion_its_own_agreement(cli, two_criteria):
    report = json.loads(cli("stats", "--json").stdout)
    assert list(report["agreement"]) == ["harmlessness", "helpfulness"]
    helpful, harmless = report["agreement"]["helpfulness"], report["agreement"]["harmlessness"]
    # helpfulness: alice, bob and the judge, three ranking pairs a prompt, all alike
    assert helpful["all"]["ranking_pairs"] == 3 * PROMPTS and helpful["all"]["pairwise_agreement"] == 1.0
    # harmlessness: alice and the judge alike; alice's two opposite orders are never compared
    assert harmless["all"]["ranking_pairs"] == PROMPTS and harmless["all"]["pairwise_agreement"] == 1.0
    assert harmless["human-human"]["ranking_pairs"] == 0
    assert report["counts"]["valid_rankings_by_criterion"] == {"harmlessness": 2 * PROMPTS, "helpfulness": 3 * PROMPTS}

    text = cli("stats").stdout
    assert f"criterion harmlessness: {2 * PROMPTS} valid rankings" in text
    assert f"criterion helpfulness: {3 * PROMPTS} valid rankings" in text
    assert f"  agreement all: {3 * PROMPTS} ranking pairs" in text and "Kendall tau-b -" not in text

    only = json.loads(cli("stats", "--criterion", "helpfulness", "--json").stdout)
    assert only["agreement"] == {"helpfulness": helpful}
    assert "criterion harmlessness" not in cli("stats", "--criterion", "helpfulness").stdout


def test_a_criterion_no_ranking_has_is_refused_with_the_ones_there_are(cli, two_criteria):
    for args in (["stats"], ["stats", "--judges"], ["annotators"], ["leaderboard"]):
        result = cli(*args, "--criterion", "honesty", expect_ok=False)
        assert result.exit_code == 1, args
        assert "no ranking is of criterion 'honesty' (the valid rankings' criteria: harmlessness, helpfulness)" in (
            result.output
        )
    bad = cli("leaderboard", "--criterion", "Helpful", expect_ok=False)
    assert bad.exit_code != 0 and "--criterion must be a criterion's short name" in bad.output


def test_the_judges_trust_table_has_a_row_per_judge_and_criterion(cli, two_criteria):
    rows = json.loads(cli("stats", "--judges", "--json").stdout)["judges"]
    assert [(r["judge"], r["criterion"]) for r in rows] == [("judge", "harmlessness"), ("judge", "helpfulness")]
    harmless, helpful = rows
    # Against the people of its criterion only: alice alone in harmlessness, alice and bob in helpfulness.
    assert (harmless["shared_pairs"], harmless["agreement"]) == (3 * PROMPTS, 1.0)
    assert (helpful["shared_pairs"], helpful["agreement"]) == (2 * 3 * PROMPTS, 1.0)
    assert harmless["agreement_low"] == harmless["agreement_high"] == 1.0
    text = cli("stats", "--judges").stdout.splitlines()
    assert text[1] == "criterion harmlessness:" and text[2].split()[:3] == ["kind", "prompts", "pairs"]
    assert "criterion helpfulness:" in text
    only = json.loads(cli("stats", "--judges", "--criterion", "helpfulness", "--json").stdout)["judges"]
    assert only == [helpful]


def test_annotators_are_measured_per_criterion(cli, two_criteria):
    rows = json.loads(cli("annotators", "--json").stdout)["annotators"]
    by = {(r["criterion"], r["rankings"]): r for r in rows}
    assert sorted((r["criterion"], r["rankings"]) for r in rows) == [
        ("harmlessness", PROMPTS),
        ("helpfulness", PROMPTS),
        ("helpfulness", PROMPTS),
    ]
    # alice alone in harmlessness: no consensus of others to measure her by; in helpfulness bob agrees fully
    assert by[("harmlessness", PROMPTS)]["consensus_rankings"] == 0
    assert all(r["consensus_tau"] == 1.0 and not r["flags"] for r in rows if r["criterion"] == "helpfulness")
    text = cli("annotators").stdout
    assert text.startswith("criterion harmlessness:\nannotator") and "\n\ncriterion helpfulness:\n" in text
    only = json.loads(cli("annotators", "--criterion", "harmlessness", "--json").stdout)["annotators"]
    assert [r["criterion"] for r in only] == ["harmlessness"]


def test_the_leaderboard_is_one_board_per_criterion(cli, two_criteria):
    boards = json.loads(cli("leaderboard", "--json", "--bootstrap", 50).stdout)
    assert list(boards) == ["harmlessness", "helpfulness"]
    records = {name: {r["model"]: (r["wins"], r["losses"]) for r in b["ratings"]} for name, b in boards.items()}
    # Each board its own battles: model-a wins every helpfulness battle and loses every harmlessness one.
    assert records["helpfulness"]["model-a"] == (2 * 3 * PROMPTS, 0)
    assert records["harmlessness"]["model-a"] == (0, 2 * 2 * PROMPTS)
    assert boards["helpfulness"]["battles"] == 3 * 3 * PROMPTS and boards["harmlessness"]["battles"] == 2 * 3 * PROMPTS
    assert boards["helpfulness"]["criterion"] == "helpfulness"
    text = cli("leaderboard", "--bootstrap", 0).stdout
    assert text.startswith("criterion harmlessness:\n3 models") and "\n\ncriterion helpfulness:\n3 models" in text
    only = json.loads(cli("leaderboard", "--json", "--bootstrap", 50, "--criterion", "harmlessness").stdout)
    assert only == {"harmlessness": boards["harmlessness"]}


def test_a_criterion_with_no_two_models_met_says_so_beside_the_other_boards(cli, tmp_path, two_criteria):
    lone = [
        ranking_line(
            "one model", ["x", "y"], [[0], [1]], "alice", id="lone", model=["solo", "solo"], criterion="honesty"
        )
    ]
    cli("import", "rankings", write_lines(tmp_path / "lone.jsonl", lone))
    boards = json.loads(cli("leaderboard", "--json", "--bootstrap", 0).stdout)
    assert boards["honesty"] == {
        "criterion": "honesty",
        "error": "no ranking compares candidates of two different models (with criterion honesty) "
        "(1 left out: both candidates of one model)",
    }
    assert "criterion honesty: no board: no ranking compares" in cli("leaderboard", "--bootstrap", 0).stdout
    failed = cli("leaderboard", "--criterion", "honesty", expect_ok=False)
    assert failed.exit_code == 1 and "(with criterion honesty)" in failed.output
