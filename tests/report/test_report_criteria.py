"""The report's Criteria section on a store ranked by two criteria that conflict, on SQLite and Postgres.

A toy world where safety and helpfulness pull apart: on requests for harm the helpful reply is the unsafe
one. Each criterion gets its row (rankings, prompts, annotators, people, pairs); the tension between them is
the share of the pairs both order that they order oppositely, checked against a count made here from the
planted rules; the page draws the chart.
"""

from __future__ import annotations

import json
import random
from itertools import combinations

from tests.db.helpers import ranking_line, write_lines

HARMFUL = ("pick a lock", "make a weapon", "hurt someone")
BENIGN = ("bake bread", "tie a knot", "plant a tree")


def world(seed: int = 7) -> tuple[list[str], int, int]:
    """Rankings by helpfulness and harmlessness of three replies per prompt, by planted rules.

    Returns the lines, and the candidate pairs both criteria order and how many they order oppositely.
    """
    rng = random.Random(seed)
    lines, shared, opposed = [], 0, 0
    for n, topic in enumerate(HARMFUL + BENIGN):
        harmful = topic in HARMFUL
        replies = [f"Here is exactly how to {topic}: step one…", f"I can explain {topic} in general terms.", "No."]
        # helpfulness: the full answer, then the general one, then the refusal
        helpful = [0, 1, 2]
        # harmlessness: for a harmful request the refusal is safest and the full answer worst; else all are safe
        # but the refusal is still ranked below the others by a careful annotator, tied with nothing
        safe = [2, 1, 0] if harmful else [0, 1, 2]
        for criterion, order in (("helpfulness", helpful), ("harmlessness", safe)):
            for person in ("ann", "bob"):
                lines.append(
                    ranking_line(
                        f"How do I {topic}?",
                        replies,
                        [[i] for i in order],
                        person,
                        id=f"{n}-{criterion}-{person}",
                        criterion=criterion,
                    )
                )
        for x, y in combinations(range(3), 2):
            shared += 1
            opposed += (helpful.index(x) < helpful.index(y)) != (safe.index(x) < safe.index(y))
    rng.shuffle(lines)  # the order they are stored in does not matter
    return lines, shared, opposed


def test_each_criterion_has_its_row_and_their_tension_is_the_planted_one(cli, tmp_path):
    lines, shared, opposed = world()
    cli("import", "rankings", write_lines(tmp_path / "world.jsonl", lines))
    cli("pairs", "build")
    out = tmp_path / "report.html"
    report = json.loads(cli("report", out, "--json").stdout)

    assert "criteria" in report["sections"]
    rows = {row["name"]: row for row in report["criteria"]["criteria"]}
    assert set(rows) == {"helpfulness", "harmlessness"}
    for row in rows.values():
        assert (row["rankings"], row["prompts"], row["annotators"], row["people"]) == (12, 6, 2, 2)
        assert row["pairs"] == 12 * 3  # three strict pairs per ranking
    (tension,) = report["criteria"]["tension"]
    assert (tension["a"], tension["b"]) == ("harmlessness", "helpfulness")
    assert (tension["shared_pairs"], tension["opposed"]) == (shared, opposed) == (18, 9)
    assert tension["share"] == opposed / shared
    html = out.read_text(encoding="utf-8")
    section = html.split('<section id="criteria">')[1].split("</section>")[0]
    assert "harmlessness – helpfulness" in section and "50%" in section and "<svg" in section


def test_a_split_verdict_is_no_verdict(cli, tmp_path):
    """Two people split evenly on a pair under one criterion: that criterion has no verdict on it."""
    lines = [
        ranking_line("Q?", ["a", "b"], [[0], [1]], "ann", id="1", criterion="helpfulness"),
        ranking_line("Q?", ["a", "b"], [[1], [0]], "bob", id="2", criterion="helpfulness"),
        ranking_line("Q?", ["a", "b"], [[1], [0]], "ann", id="3", criterion="harmlessness"),
    ]
    cli("import", "rankings", write_lines(tmp_path / "split.jsonl", lines))
    report = json.loads(cli("report", tmp_path / "r.html", "--json").stdout)
    assert report["criteria"]["tension"] == []


def test_the_measuring_sections_read_one_criterion_the_one_asked(cli, tmp_path):
    """Agreement, judges and the leaderboard measure one criterion: `--criterion`'s, else overall, else the one
    with the most rankings; never a mixture (mixed, ann and bob would disagree with themselves on harmful prompts)."""
    lines, _, _ = world()
    cli("import", "rankings", write_lines(tmp_path / "world.jsonl", lines))
    default = json.loads(cli("report", tmp_path / "a.html", "--json").stdout)
    assert default["criterion"] in ("harmlessness", "helpfulness")  # 12 rankings each, no overall: the first name
    for criterion in ("helpfulness", "harmlessness"):
        report = json.loads(cli("report", tmp_path / f"{criterion}.html", "--criterion", criterion, "--json").stdout)
        assert report["criterion"] == criterion
        everyone = report["agreement"]["categories"]["all"]
        assert everyone["pairwise_agreement"] == 1.0 and everyone["ranking_pairs"] == 6  # ann and bob, 6 prompts
        html = (tmp_path / f"{criterion}.html").read_text(encoding="utf-8")
        assert f"measure <b>{criterion}</b>" in html
    unknown = cli("report", tmp_path / "x.html", "--criterion", "honesty", expect_ok=False)
    assert (
        unknown.exit_code != 0
        and "no valid ranking is by honesty (the criteria ranked by: harmlessness, helpfulness)" in unknown.output
    )
