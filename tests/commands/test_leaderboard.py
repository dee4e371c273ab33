"""`preflab leaderboard` on a real store (SQLite and Postgres): text, --json, filters, style control, pairwise."""

import json

import pytest

from tests.db.leaderboard.store import simulated_store

PROMPTS = 100
ORDER = ["policy-v3", "policy-v2", "policy-v1", "base"]


@pytest.fixture
def store(sessions, tmp_path):
    simulated_store(sessions, tmp_path / "rankings.jsonl", prompts=PROMPTS)


def board(cli, *args) -> dict:
    """The board of the store's one criterion (--json keys a board by its criterion)."""
    (only,) = json.loads(cli("leaderboard", "--json", "--bootstrap", 200, *args).output).values()
    return only


def test_people_rank_the_versions_in_order_with_intervals_and_the_method_stated(cli, store):
    text = cli("leaderboard", "--annotator-kind", "human", "--bootstrap", 200).output
    assert f"4 models, {PROMPTS * 2:,} battles from {PROMPTS * 2:,} rankings by people" in text
    assert (
        "400 points = 10× the odds of winning; the mean rating is 1000 (a model weighing its battles, up to 50); "
        "a tie is half a win to each side"
    ) in text
    assert "95% intervals from 200 bootstrap rounds over rankings (seed 0)" in text
    rows = [line.split() for line in text.splitlines() if line.split()[1:2] and line.split()[1] in ORDER]
    assert [row[1] for row in rows] == ORDER
    low, _, high = rows[0][3:6]  # "1234 – 1290"
    assert int(low) <= int(rows[0][2]) <= int(high)

    people = board(cli, "--annotator-kind", "human")
    assert [r["model"] for r in people["ratings"]] == ORDER
    assert sum(r["battles"] for r in people["ratings"]) == 2 * PROMPTS * 2
    assert all(r["lower"] <= r["median"] <= r["upper"] for r in people["ratings"])
    assert people["method"]["ties"] == "a tie is half a win to each side"
    assert (people["method"]["scale"], people["method"]["offset"], people["method"]["anchor"]) == (400, 1000, "mean")
    assert sum(r["rating"] for r in people["ratings"]) == pytest.approx(4000)
    ranks = [r["rank"] for r in people["ratings"]]
    assert ranks[0] == 1 and ranks == sorted(ranks)

    # the judge ranked every pair backwards; both together nearly cancel out
    assert [r["model"] for r in board(cli, "--annotator-kind", "ai")["ratings"]] == ORDER[::-1]
    assert board(cli, "--annotator-kind", "any")["battles"] == 2 * PROMPTS * 2
    again = board(cli, "--annotator-kind", "human")
    assert again["ratings"] == people["ratings"]  # seeded: the same intervals every time

    anchored = board(cli, "--annotator-kind", "human", "--anchor", "base")
    assert {r["model"]: r["rating"] for r in anchored["ratings"]}["base"] == pytest.approx(1000)
    arena = board(cli, "--annotator-kind", "human", "--source", "import:arena")
    arena_prompts = len(range(0, PROMPTS, 3))
    assert arena["battles"] == 2 * arena_prompts and arena["filters"]["source"] == "import:arena"
    assert arena["left_out"] == {
        "rankings by AI judges (--annotator-kind human)": 2 * PROMPTS,
        "rankings whose source is not import:arena (--source)": 2 * (PROMPTS - arena_prompts),
    }
    text = cli("leaderboard", "--annotator-kind", "human", "--source", "import:arena", "--bootstrap", 0).output
    assert f"left out {2 * (PROMPTS - arena_prompts)} battles: rankings whose source is not import:arena" in text
    unknown = cli("leaderboard", "--source", "import:rankings", expect_ok=False)
    assert unknown.exit_code == 1
    assert unknown.output == (
        "Error: no ranking has source 'import:rankings' (the rankings' sources: import, import:arena)\n"
    )

    missing = cli("leaderboard", "--prompts", "test", expect_ok=False)
    assert missing.exit_code == 1
    assert missing.output.strip() == (
        "Error: no ranking compares candidates of two different models "
        f"(with prompts test) ({PROMPTS * 4} left out: prompts not of split test "
        "(--prompts))"
    )
    assert "not on the board" in cli("leaderboard", "--anchor", "gpt-5", expect_ok=False).output
    later = cli("leaderboard", "--since", "2999-01-01", expect_ok=False).output
    assert "with since 2999-01-01" in later


def test_style_control_and_the_pairwise_tables(cli, store):
    text = cli("leaderboard", "--annotator-kind", "human", "--bootstrap", 50, "--style-control", "--pairwise").output
    assert "style-ctrl" in text and "effect on the log-odds per standard deviation: length" in text
    assert "predicted probability that the row beats the column" in text

    result = board(cli, "--annotator-kind", "human", "--style-control", "--pairwise")
    plain = {r["model"]: r["rating"] for r in result["ratings"]}
    controlled = {r["model"]: r for r in result["style"]}
    assert set(controlled) == set(plain)
    # stronger versions wrote longer replies: length soaks up part of their lead
    assert result["style_coefficients"]["length"] > 0
    spread = plain["policy-v3"] - plain["base"]
    assert controlled["policy-v3"]["rating"] - controlled["base"]["rating"] < spread

    pairwise = result["pairwise"]
    assert pairwise["models"] == ORDER
    n = len(ORDER)
    for i in range(n):
        for j in range(n):
            if i != j:
                assert pairwise["predicted"][i][j] + pairwise["predicted"][j][i] == pytest.approx(1, abs=1e-3)
                assert pairwise["battles"][i][j] == pairwise["battles"][j][i]
                if pairwise["win_rate"][i][j] is not None:
                    assert pairwise["win_rate"][i][j] + pairwise["win_rate"][j][i] == pytest.approx(1, abs=1e-3)
    assert sum(map(sum, pairwise["battles"])) == 2 * PROMPTS * 2
    assert pairwise["share_better"][0][n - 1] == 1.0


def test_a_model_of_few_battles_shows_its_exact_interval_and_no_rank(cli, sessions, tmp_path):
    from tests.db.leaderboard.test_store_laws import games, lines

    path = tmp_path / "battles.jsonl"
    path.write_text("\n".join(lines(games(), renamed=False)) + "\n", encoding="utf-8")
    cli("import", "rankings", path)
    text = cli("leaderboard", "--bootstrap", 200).output
    row = next(line.split() for line in text.splitlines() if " newbie " in line)
    assert row[:3] == ["–", "newbie", row[2]] and row[3:6] == ["−∞", "–", row[5]]
    assert row[-5:] == ["only", "3", "battles,", "all", "lost"] and "not ranked" in text
    assert "–: few battles, an exact test's interval (∞: no bound on that side)" in text
    result = board(cli)
    newbie = next(r for r in result["ratings"] if r["model"] == "newbie")
    assert (newbie["rank"], newbie["lower"], newbie["interval"], newbie["few_battles"]) == (
        None,
        None,
        "exact",
        "only 3 battles, all lost",
    )
    assert newbie["upper"] < min(r["rating"] for r in result["ratings"] if r["model"] != "newbie") + 700
    assert [r["rank"] for r in result["ratings"][:5]] == sorted(r["rank"] for r in result["ratings"][:5])
    assert result["method"]["centre_cap"] == [50]
