"""Which judge to trust: agreement with people and its interval, Kendall tau-b, position bias, the order.

The judges here are plain functions written in the test (no model): each writes its
rankings through the judges' own path (`judge_prompts`), as an AI annotator.
"""

from __future__ import annotations

import json

import pytest

PROMPTS = 12
GRADES = ("best", "fair", "worst")  # the people rank them in this order


def _write_human_rankings(path):
    lines = [
        json.dumps(
            {
                "prompt": f"Question number {k}?",
                "responses": [f"{g} answer to {k}" for g in GRADES],
                "ranking": [[0], [1], [2]],
                "annotator": "alice",
                "id": f"h{k}",
            }
        )
        for k in range(PROMPTS)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _grade(text: str) -> int:
    """3 for the best answer, 1 for the worst: the people's order."""
    return len(GRADES) - GRADES.index(text.split()[0])


def _scorer(wrong_on=lambda prompt_id: False):
    """A judge that scores each reply alone: the people's order, reversed on the prompts `wrong_on` picks."""

    def judge(items):
        return [
            (
                {
                    c: float(-_grade(t) if wrong_on(item.prompt_id) else _grade(t))
                    for c, t in zip(item.candidate_ids, item.texts)
                },
                {},
            )
            for item in items
        ]

    return judge


def _pairwise(p_first: float, p_second: float):
    """A pairwise judge whose verdicts follow only the position: P(x better | x first), P(x better | x second)."""
    from itertools import combinations

    from preflab.labelling.judges.pairwise import rank_pairs

    def judge(items):
        return [
            rank_pairs(
                item.candidate_ids,
                dict.fromkeys(combinations(item.candidate_ids, 2), (p_first, p_second)),
                "copeland",
            )
            for item in items
        ]

    return judge


JUDGES = {  # name: (kind, judge)
    "oracle": ("likelihood", _scorer()),
    "noisy": ("score", _scorer(lambda prompt_id: prompt_id % 3 == 0)),  # reversed on a third of the prompts
    "always-first": ("pairwise", _pairwise(0.9, 0.1)),  # answers "A" whatever it is shown
    "always-second": ("pairwise", _pairwise(0.2, 0.7)),  # answers "B" whatever it is shown
}


def judged_store(cli, sessions, tmp_path) -> dict[str, int]:
    """People rank 12 prompts' three answers; the four JUDGES rank them too. Returns judge name -> annotator id."""
    from preflab.labelling.judges.base import JudgeRun, judge_prompts

    cli("import", "rankings", _write_human_rankings(tmp_path / "people.jsonl"))
    ids = {}
    for name, (kind, judge) in JUDGES.items():
        run = JudgeRun(kind, f"test/{name}", {"test_judge": name})
        ids[name] = judge_prompts(sessions, run, judge).annotator_id
    return ids


def test_the_interval_is_seeded_and_holds_the_point_estimate():
    from preflab.labelling.judges.trust import agreement_interval

    counts = [[3, 3], [3, 2], [6, 1], [1, 1], [3, 0], [10, 9], [3, 3], [2, 1]]
    point = sum(a for _, a in counts) / sum(n for n, _ in counts)
    low, high = agreement_interval(counts)
    assert low < point < high and low >= 0 and high <= 1
    assert agreement_interval(counts) == (low, high)  # seed 0 by default: the same interval
    assert agreement_interval(counts, seed=1) != (low, high)
    assert agreement_interval(counts, level=0.5)[0] > low  # a narrower interval inside it
    assert agreement_interval([[3, 3], [5, 5], [1, 1], [2, 2], [4, 4]]) == (1.0, 1.0)  # always agrees: [1, 1]
    # Under five prompts there is no interval: one prompt's three agreeing pairs are not [1, 1] certainty.
    assert agreement_interval([[3, 3]]) is None and agreement_interval([[3, 3], [5, 5], [1, 1], [2, 2]]) is None
    assert agreement_interval([]) is None and agreement_interval([[0, 0]]) is None


def test_the_interval_resamples_prompts_not_pairs():
    """Ten prompts, half all agreement and half all disagreement: their pairs are not independent draws."""
    from preflab.labelling.judges.trust import agreement_interval

    low, high = agreement_interval([[50, 50]] * 5 + [[50, 0]] * 5)
    # Resampling the ten prompts gives about 0.2–0.8; resampling the 500 pairs would give about 0.46–0.54.
    assert low <= 0.25 and high >= 0.75


def test_judges_are_ordered_by_the_lower_bound_with_their_position_bias(cli, sessions, tmp_path):
    from preflab.labelling.judges.report import judge_report
    from preflab.labelling.judges.trust import judge_trust

    ids = judged_store(cli, sessions, tmp_path)
    with sessions.begin() as session:
        trust = judge_trust(session)
        again = judge_trust(session)
        report = {r["annotator_id"]: r for r in judge_report(session)}
    assert trust == again and trust["bootstrap"] == {"rounds": 1000, "seed": 0, "level": 0.95, "resampled": "prompts"}
    rows = {r["annotator_id"]: r for r in trust["judges"]}
    # Trust first the highest lower bound; the judges that never ranked a pair strictly (all ties) come last.
    assert [r["annotator_id"] for r in trust["judges"]] == [
        ids["oracle"],
        ids["noisy"],
        ids["always-first"],
        ids["always-second"],
    ]

    oracle, noisy = rows[ids["oracle"]], rows[ids["noisy"]]
    assert (oracle["agreement"], oracle["agreement_low"], oracle["agreement_high"]) == (1.0, 1.0, 1.0)
    assert oracle["kendall_tau"] == 1.0 and oracle["shared_prompts"] == PROMPTS and oracle["shared_pairs"] == 36
    assert noisy["agreement"] == pytest.approx(8 / 12)  # reversed (no pair agrees) on 4 of the 12 prompts
    assert noisy["agreement"] == report[ids["noisy"]]["human_agreement"]["pairwise_agreement"]
    assert noisy["agreement_low"] < noisy["agreement"] < noisy["agreement_high"] <= 1.0
    assert noisy["kendall_tau"] == pytest.approx((8 - 4) / 12)
    # Judges that score each reply alone cannot be swayed by position.
    assert oracle["position_bias"] is None and noisy["position_bias"] is None

    first, second = rows[ids["always-first"]], rows[ids["always-second"]]
    assert (first["position_bias"], first["position_first"], first["position_second"]) == (1.0, 1.0, 0.0)
    assert (second["position_bias"], second["position_first"], second["position_second"]) == (1.0, 0.0, 1.0)
    assert first["pairs_judged"] == 3 * PROMPTS and first["agreement"] is None and first["agreement_low"] is None
    assert first["shared_pairs"] == 0 and report[ids["always-first"]]["swap_consistency"] == 0.0


def test_a_consistent_pairwise_judge_has_no_position_bias(cli, sessions, tmp_path):
    from preflab.labelling.judges.base import JudgeRun, judge_prompts
    from preflab.labelling.judges.pairwise import rank_pairs
    from preflab.labelling.judges.trust import judge_trust

    cli("import", "rankings", _write_human_rankings(tmp_path / "people.jsonl"))

    def follows_people(items):  # the better answer wins in both orders (P 0.8 shown first, 0.6 shown second)
        out = []
        for item in items:
            grade = dict(zip(item.candidate_ids, map(_grade, item.texts)))
            results = {
                (x, y): (0.8, 0.6) if grade[x] > grade[y] else (0.2, 0.4)
                for i, x in enumerate(item.candidate_ids)
                for y in item.candidate_ids[i + 1 :]
            }
            out.append(rank_pairs(item.candidate_ids, results, "copeland"))
        return out

    judge_prompts(sessions, JudgeRun("pairwise", "test/fair", {}), follows_people)
    with sessions.begin() as session:
        (row,) = judge_trust(session)["judges"]
    assert row["position_bias"] == 0.0 and row["agreement"] == row["agreement_low"] == 1.0


def test_no_judge_no_rows(sessions):
    from preflab.labelling.judges.trust import judge_trust

    with sessions.begin() as session:
        assert judge_trust(session)["judges"] == []
