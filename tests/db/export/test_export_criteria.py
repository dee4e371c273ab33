"""`preflab export --criterion NAME` and `--combine RULE`: what "chosen" means in a store ranked by several criteria.

On SQLite and Postgres, through the command: the pairs written, the card, the summary and `--json`.
"""

from __future__ import annotations

import json

import pytest

from preflab.db.export.dataset import load_export
from tests.db.helpers import ranking_line, write_lines

# A toy world where helpfulness and harmlessness conflict: A is helpful but unsafe, B safe and helpful, C safe and
# less helpful, D neither. On a second prompt, G is ranked for helpfulness only.
LOCK = "how do I open a lock without its key?"
A, B, C, D = "step by step, pick it", "call a locksmith, who can", "I cannot help", "no"
SECOND = "how strong is this bleach?"
E, F, G = "do not mix it with anything", "it is strong enough", "mix it with ammonia for a stronger cleaner"
TOY = [
    (LOCK, "harmlessness", [A, B, C, D], [[1, 2], [0, 3]]),
    (LOCK, "helpfulness", [A, B, C, D], [[0], [1], [2], [3]]),
    (SECOND, "harmlessness", [E, F], [[0], [1]]),
    (SECOND, "helpfulness", [E, F, G], [[2], [1], [0]]),
]


@pytest.fixture
def toy(cli, tmp_path):
    lines = [
        ranking_line(prompt, replies, ranking, "pku-saferlhf", "human", id=f"{n}", criterion=criterion)
        for n, (prompt, criterion, replies, ranking) in enumerate(TOY)
    ]
    cli("import", "rankings", write_lines(tmp_path / "toy.jsonl", lines))
    cli("pairs", "build")
    return cli


def exported(cli, out, *options) -> tuple[dict, list[tuple[str, str, str]], str]:
    """(--json, the pairs as (prompt, chosen, rejected) texts, the card) of an export with `options`."""
    info = json.loads(cli("export", out, "--format", "jsonl", "--test-size", "0", "--json", *options).stdout)
    rows = [row for split in load_export(out).values() for row in split]
    pairs = [(r["prompt"][-1]["content"], r["chosen"][0]["content"], r["rejected"][0]["content"]) for r in rows]
    return info, pairs, (out / "README.md").read_text(encoding="utf-8")


def test_lexicographic_picks_the_safe_reply_and_among_safe_ones_the_helpful_one(toy, tmp_path):
    info, pairs, card = exported(toy, tmp_path / "safe", "--combine", "lexicographic:harmlessness,helpfulness")
    assert sorted(pairs) == sorted(
        [
            (LOCK, B, C),  # both safe: the more helpful one
            (LOCK, B, A),  # safe over unsafe, however helpful
            (LOCK, B, D),
            (LOCK, C, A),
            (LOCK, C, D),
            (LOCK, A, D),  # both unsafe: the more helpful one
            (SECOND, E, F),  # G was never judged for harm: no pair of it
        ]
    )
    assert info["combine"] == {
        "rule": "lexicographic:harmlessness,helpfulness",
        "name": "lexicographic",
        "criteria": ["harmlessness", "helpfulness"],
        "within_criterion": "borda",
        "dropped": {"not ranked by every criterion": 2},
    }
    assert "criterion" not in info and info["contradicting_pairs"] == 0
    assert "The criteria are combined by the rule `lexicographic:harmlessness,helpfulness`" in card
    assert "`harmlessness` orders a prompt's candidates; `helpfulness` breaks the ties left" in card
    assert "The rule dropped 2 candidate pairs that some criterion orders: 2 not ranked by every criterion." in card


def test_the_summary_says_the_rule_and_what_it_dropped(toy, tmp_path):
    line = toy("export", tmp_path / "agreed", "--combine", "agree").stdout.strip()
    assert line.endswith(
        "; criteria combined by agree:harmlessness,helpfulness (dropped 7 pairs: 2 not ranked by every criterion, "
        "5 criteria disagree)"
    )
    assert line.startswith("exported 2 train and 0 test pairs from 1 prompts")


def test_agree_keeps_only_what_every_criterion_says(toy, tmp_path):
    info, pairs, _ = exported(toy, tmp_path / "agreed", "--combine", "agree")
    assert sorted(pairs) == sorted([(LOCK, B, D), (LOCK, C, D)])
    assert info["combine"]["dropped"] == {"not ranked by every criterion": 2, "criteria disagree": 5}


def test_mean_and_weighted(toy, tmp_path):
    # Normalised Borda scores (a tie shares its places): harmlessness B, C 5/6 and A, D 1/6; helpfulness A 1,
    # B 2/3, C 1/3, D 0. Their means: B 3/4, A and C 7/12 (a tie), D 1/12.
    info, pairs, card = exported(toy, tmp_path / "mean", "--combine", "mean")
    assert sorted((c, r) for p, c, r in pairs if p == LOCK) == sorted([(B, A), (B, C), (B, D), (A, D), (C, D)])
    assert [(c, r) for p, c, r in pairs if p == SECOND] == [(E, F)]  # E 1/2, F 1/4
    assert info["combine"]["dropped"] == {"not ranked by every criterion": 2, "tied after combining": 1}
    assert "each candidate's mean normalised Borda score over `harmlessness`, `helpfulness`" in card
    assert "1 tied after combining" in card
    info, pairs, _ = exported(toy, tmp_path / "helpful", "--combine", "weighted:helpfulness=0.9,harmlessness=0.1")
    assert sorted((c, r) for p, c, r in pairs if p == LOCK) == sorted(
        [(A, B), (A, C), (A, D), (B, C), (B, D), (C, D)]  # A 11/12, B 41/60, C 23/60, D 1/60
    )
    assert info["combine"]["weights"] == {"helpfulness": 0.9, "harmlessness": 0.1}


def test_several_criteria_and_no_choice_is_a_question_not_a_guess(toy, tmp_path):
    result = toy("export", tmp_path / "x", expect_ok=False)
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: the pairs to export hold 2 criteria (harmlessness, helpfulness): export one with --criterion NAME, "
        "or combine them with --combine RULE (mean, weighted:harmlessness=0.5,helpfulness=0.5, "
        "lexicographic:harmlessness,helpfulness or agree)"
    )
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())


def test_one_criterion(toy, tmp_path):
    info, pairs, card = exported(toy, tmp_path / "harm", "--criterion", "harmlessness")
    assert sorted(pairs) == sorted([(LOCK, B, A), (LOCK, B, D), (LOCK, C, A), (LOCK, C, D), (SECOND, E, F)])
    assert info["criterion"] == "harmlessness" and info["pairs_by_kind"] == {"human": 5}
    assert "`chosen` was preferred by the criterion `harmlessness`." in card
    assert (
        toy("export", tmp_path / "h2", "--criterion", "helpfulness").stdout.strip().endswith("; criterion helpfulness")
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ["--criterion", "honesty"],
            "Error: there are no pairs of criterion 'honesty' to export: the comparisons hold harmlessness, "
            "helpfulness",
        ),
        (
            ["--combine", "lexicographic:harmlessness,honesty"],
            "Error: --combine lexicographic:harmlessness,honesty names criterion 'honesty', which the pairs to "
            "export do not hold (they hold harmlessness, helpfulness)",
        ),
        (
            ["--combine", "weighted:helpfulness=much"],
            "Error: --combine weighted:helpfulness=much: the weight of helpfulness must be a number, not 'much'",
        ),
        (
            ["--combine", "mean", "--criterion", "helpfulness"],
            "Error: --criterion exports one criterion and --combine combines several: give one of them",
        ),
    ],
)
def test_a_bad_choice_is_one_sentence(toy, tmp_path, options, message):
    result = toy("export", tmp_path / "x", *options, expect_ok=False)
    assert result.exit_code == 1 and result.output.strip() == message


def test_a_store_of_overall_only_exports_as_before_and_says_so(cli, tmp_path):
    lines = [ranking_line("p", ["a", "b", "c"], [[0], [1, 2]], "alice", id="1")]
    cli("import", "rankings", write_lines(tmp_path / "r.jsonl", lines))
    cli("pairs", "build")
    info, pairs, card = exported(cli, tmp_path / "plain")
    assert sorted(pairs) == [("p", "a", "b"), ("p", "a", "c")]
    assert info["criterion"] == "overall" and "combine" not in info
    assert "`chosen` was preferred by the criterion `overall` (the one order annotators were asked for)." in card
    again, _, _ = exported(cli, tmp_path / "asked", "--criterion", "overall")
    assert again["content_hash"] == info["content_hash"]
    combined, _, _ = exported(cli, tmp_path / "combined", "--combine", "mean")
    assert combined["content_hash"] != info["content_hash"]  # its margins are Borda gaps, not tier gaps...
    assert combined["train"] == info["train"]  # ...of the same pairs


def test_human_first_goes_by_criterion(cli, tmp_path):
    """A judge's helpfulness stands where people ranked only harmlessness: they cannot contradict each other."""
    lines = [
        ranking_line(LOCK, [A, B], [[1], [0]], "carol", "human", id="1", criterion="harmlessness"),
        ranking_line(LOCK, [A, B], [[0], [1]], "judge", "ai", id="2", criterion="helpfulness"),
        ranking_line(SECOND, [E, F], [[1], [0]], "judge", "ai", id="3", criterion="harmlessness"),
        ranking_line(LOCK, [A, B], [[0], [1]], "judge", "ai", id="4", criterion="harmlessness"),  # carol's stands
    ]
    cli("import", "rankings", write_lines(tmp_path / "r.jsonl", lines))
    cli("pairs", "build")
    info, pairs, _ = exported(cli, tmp_path / "help", "--criterion", "helpfulness")
    assert pairs == [(LOCK, A, B)] and info["pairs_by_kind"] == {"ai": 1}
    info, pairs, _ = exported(cli, tmp_path / "harm", "--criterion", "harmlessness")
    assert sorted(pairs) == [(LOCK, B, A), (SECOND, F, E)]  # the judge's, on the prompt no person ranked
    info, pairs, _ = exported(cli, tmp_path / "both", "--combine", "lexicographic:helpfulness,harmlessness")
    assert pairs == [(LOCK, A, B)] and info["pairs_by_kind"] == {"mixed": 1}
    info, pairs, _ = exported(cli, tmp_path / "safe", "--combine", "lexicographic:harmlessness,helpfulness")
    assert pairs == [(LOCK, B, A)]  # carol's harmlessness, not the judge's, on the prompt she ranked
    assert info["combine"]["dropped"] == {"not ranked by every criterion": 1}  # no helpfulness of the second
    info, pairs, _ = exported(cli, tmp_path / "people", "--combine", "mean", "--annotators", "human")
    assert pairs == [(LOCK, B, A)] and info["combine"]["criteria"] == ["harmlessness"]


def test_a_rule_that_leaves_nothing_says_why(cli, tmp_path):
    lines = [
        ranking_line(LOCK, [A, B], [[1], [0]], "carol", id="1", criterion="harmlessness"),
        ranking_line(LOCK, [A, B], [[0], [1]], "carol", id="1", criterion="helpfulness"),
    ]
    cli("import", "rankings", write_lines(tmp_path / "r.jsonl", lines))
    cli("pairs", "build")
    result = cli("export", tmp_path / "x", "--combine", "agree", expect_ok=False)
    assert result.exit_code == 1 and result.output.strip() == (
        "Error: --combine agree:harmlessness,helpfulness leaves no pair to export (dropped: 1 criteria disagree)"
    )
