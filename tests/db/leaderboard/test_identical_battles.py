"""Arena battles whose two models gave the same reply count on the leaderboard (issue 46 §1h), and only there.

Such a battle is a ranking of its one reply, with both models and the verdict in its details. The
leaderboard reads it as the battle it was (a win, a loss or a tie), so the leaderboard equals a hand
count of the rows, and the rating of the rows' own (model_a, model_b, winner) columns; it gives no pair,
and the export says how many it left out and why. On SQLite and Postgres.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from preflab.db.leaderboard.battles import Filters, from_labels, read_battles
from preflab.db.leaderboard.board import LeaderboardConfig, leaderboard, rate
from preflab.db.quality.agreement import stats
from tests.db.ingest.datasets.shapes_b import pairs, run_import, write_jsonl
from tests.db.ingest.datasets.test_arena import battle, bot, user
from tests.properties import examples

HI = [user("hi"), bot("Hello! How can I help you today?")]


def same(qid: str, winner: str, models: tuple[str, str], judge: str = "arena_user_1") -> dict:
    """A battle whose two models answered "hi" with the same words."""
    return battle(qid, winner, HI, HI, judge=judge, models=models)


def differ(qid: str, winner: str, models: tuple[str, str], judge: str = "arena_user_1") -> dict:
    return battle(qid, winner, [user("2+2?"), bot(f"4, says {models[0]}")], [user("2+2?"), bot("Four.")], judge, models)


ROWS = [
    same("s1", "model_a", ("ultra", "tiny")),
    same("s2", "tie", ("ultra", "mid"), judge="arena_user_2"),
    same("s3", "tie (bothbad)", ("mid", "tiny")),
    same("s4", "model_b", ("tiny", "mid")),
    differ("d1", "model_a", ("ultra", "mid")),
    differ("d2", "tie", ("mid", "tiny")),
    differ("d3", "model_b", ("tiny", "ultra")),
]
# by hand: (wins, ties, losses) of each model over all seven battles
HAND = {"ultra": (3, 1, 0), "mid": (1, 3, 1), "tiny": (0, 2, 3)}


def credited(board) -> dict[str, tuple[int, int, int]]:
    return {r.model: (r.wins, r.ties, r.losses) for r in board.ratings}


def test_identical_replies_are_battles_on_the_leaderboard_and_no_pair(cli, sessions, tmp_path):
    path = write_jsonl(tmp_path / "arena.jsonl", ROWS)
    summary = run_import(sessions, path, "arena")
    assert (summary.rankings, summary.quarantined, summary.identical_replies) == (7, 0, 4)
    # d2 a tie of two replies; s2, s3 battles of one reply voted a tie: counted apart (a new user added them up)
    assert (summary.ties, summary.rankings_with_ties, summary.identical_ties) == (1, 1, 2)
    line = cli("import", "dataset", path).stdout  # the second time: all duplicates, so counts of nothing new
    assert "0 new rankings (0 ties, 0 rankings with tied replies)" in line

    with sessions.begin() as s:
        board = leaderboard(s, LeaderboardConfig(bootstrap=0))
        assert (board.battles, board.rankings, board.left_out) == (7, 7, {})
        assert credited(board) == HAND
        # a filter counts what it leaves out: an identical battle is one battle
        later = read_battles(s, Filters(since=datetime(2999, 1, 1, tzinfo=timezone.utc)))
        assert (len(later), later.left_out) == (0, {"rankings stored before 2999-01-01 00:00 UTC (--since)": 7})
        humans = read_battles(s, Filters(annotator_kind="human"))
        assert (len(humans), humans.left_out) == (7, {})

    # the pairs are the two strict verdicts with different replies; the export counts the rankings without one
    assert pairs(sessions) == sorted([("4, says ultra", "Four.", 1.0), ("Four.", "4, says tiny", 1.0)], key=repr)
    exported = cli("export", tmp_path / "export", "--annotators", "any")
    out = json.loads(cli("export", tmp_path / "export-2", "--annotators", "any", "--json").stdout)
    identical = "battles of identical replies (two models gave the same reply: a vote on the leaderboard, no pair)"
    tie = "whole ties (every reply ranked alike: a verdict of no preference, no pair)"
    assert out["unpaired_rankings"] == {identical: 4, tie: 1}  # d2 is a tie of two replies
    assert f"Rankings that give no pair: 4 {identical}, 1 {tie}." in (tmp_path / "export" / "README.md").read_text()
    assert "; 5 rankings gave no pair (4 battles of identical replies, 1 whole tie)" in exported.stdout


def test_agreement_is_measured_on_what_was_ranked_alike(sessions, tmp_path):
    """Two judges' verdicts on one pair of replies disagree; identical battles beside them change no rate."""
    voted = [differ("v1", "model_a", ("ultra", "mid")), differ("v2", "model_b", ("ultra", "mid"), judge="arena_user_2")]
    run_import(sessions, write_jsonl(tmp_path / "voted.jsonl", voted), "arena")
    with sessions.begin() as s:
        before = stats(s)["agreement"]["all"]
    run_import(sessions, write_jsonl(tmp_path / "same.jsonl", ROWS[:4]), "arena")
    with sessions.begin() as s:
        after = stats(s)
    rates = ("shared_pairs", "pairwise_agreement", "kendall_tau")
    assert (
        {k: after["agreement"]["all"][k] for k in rates}
        == {k: before[k] for k in rates}
        == {
            "shared_pairs": 1,
            "pairwise_agreement": 0.0,
            "kendall_tau": -1.0,
        }
    )
    assert after["counts"]["rankings"] == {"total": 6, "valid": 6}


MODELS = ("ultra", "large", "mid", "small")
WINNERS = ("model_a", "model_b", "tie", "tie (bothbad)")


@st.composite
def arenas(draw) -> list[tuple[tuple[str, str], str, bool]]:
    """Battles: (model_a, model_b), the winner, and whether the two replies were the same."""
    n = draw(st.integers(1, 8))
    return [
        (
            tuple(draw(st.permutations(MODELS))[:2]),
            draw(st.sampled_from(WINNERS)),
            draw(st.booleans()),
        )
        for _ in range(n)
    ]


def test_the_store_leaderboard_is_the_rows_own_count_and_rating(sessions, tmp_path):
    """Law: whatever the battles, identical replies or not, the store's leaderboard equals the rating of the
    rows' own (model_a, model_b, winner) columns, count for count (battles share the database across examples:
    the comparison is of every battle imported so far)."""
    rows: list[dict] = []
    run = iter(range(10**6))

    @settings(max_examples=examples(8))
    @given(arenas())
    def law(battles):
        new = []
        for models, winner, identical in battles:
            qid = f"q{next(run)}"
            new.append((same if identical else differ)(qid, winner, models, judge=f"judge-{qid}"))
        rows.extend(new)
        run_import(sessions, write_jsonl(tmp_path / f"{qid}.jsonl", new), "arena")
        config = LeaderboardConfig(bootstrap=0)
        with sessions.begin() as s:
            stored = leaderboard(s, config)
        direct = rate(from_labels(*zip(*((r["model_a"], r["model_b"], r["winner"]) for r in rows))), config)
        assert stored.battles == len(rows)
        assert credited(stored) == credited(direct)
        by_model = {r.model: r.rating for r in direct.ratings}
        assert all(abs(r.rating - by_model[r.model]) < 1e-6 for r in stored.ratings)
        ties = Counter(m for r in rows if "tie" in r["winner"] for m in (r["model_a"], r["model_b"]))
        assert {r.model: r.ties for r in stored.ratings} == {m: ties[m] for m in by_model}

    law()
