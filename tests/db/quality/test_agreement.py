"""`preflab stats`: counts and tie-aware agreement."""

import json

from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import kendalltau

from preflab.db.quality.agreement import compare_rankings
from tests.db.helpers import ranking_line, write_lines


def test_identical_and_reversed_rankings():
    assert compare_rankings([[1], [2], [3]], [[1], [2], [3]]) == (3, 3, 1.0)
    shared, agree, tau = compare_rankings([[1], [2], [3]], [[3], [2], [1]])
    assert (shared, agree) == (3, 0) and abs(tau + 1) < 1e-12


def test_ties_and_partial_rankings_use_shared_strict_pairs():
    # second ranking ties 1 and 2 and leaves 4 unranked: shared candidates 1, 2, 3
    shared, agree, tau = compare_rankings([[1], [2], [3], [4]], [[1, 2], [3]])
    assert (shared, agree) == (2, 2)
    assert abs(tau - kendalltau([0, 1, 2], [0, 0, 1]).statistic) < 1e-12


@given(st.permutations(range(5)), st.permutations(range(5)))
def test_agreement_rate_matches_tau_for_strict_rankings(p, q):
    shared, agree, tau = compare_rankings([[i] for i in p], [[i] for i in q])
    assert shared == 10
    assert abs(tau - (2 * agree - shared) / shared) < 1e-9


def test_stats_command_reports_counts_and_agreement(cli, tmp_path):
    lines = [
        ranking_line("Q", ["a", "b", "c"], [[0], [1], [2]], "alice", id="1"),
        ranking_line("Q", ["a", "b", "c"], [[0], [2], [1]], "bob", id="1"),
        ranking_line("Q", ["a", "b", "c"], [[0], [1], [2]], "judge", "ai", id="1"),
        ranking_line("R", ["x", "y"], [[0], [1]], "alice", id="2"),
    ]
    cli("import", "rankings", write_lines(tmp_path / "r.jsonl", lines))
    report = json.loads(cli("stats", "--json").stdout)
    c = report["counts"]
    assert c["prompts"] == 2 and c["candidates"] == 5 and c["rankings"]["valid"] == 4
    assert c["annotators"] == {"human": 2, "ai": 1}
    assert list(c["annotators"]) == ["ai", "human"]  # by key, on either database: the same line on both
    assert list(report["agreement"]) == ["overall"]  # one entry per criterion the rankings have
    a = report["agreement"]["overall"]
    assert a["all"]["prompts"] == 1 and a["all"]["ranking_pairs"] == 3
    assert a["human-human"]["shared_pairs"] == 3 and a["human-human"]["pairwise_agreement"] == 2 / 3
    assert a["human-ai"]["ranking_pairs"] == 2 and a["human-ai"]["pairwise_agreement"] == 5 / 6
    assert a["ai-ai"]["pairwise_agreement"] is None
    text = cli("stats").stdout
    assert "agreement human-human" in text and "0.667" in text
