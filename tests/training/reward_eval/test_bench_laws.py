"""The reward bench's numbers against a direct count, whatever the verdicts, categories, kinds and margins.

RewardBench scores strictly: a pair is right only when chosen scores above rejected.
Every accuracy the bench reports (overall, per category, per annotator kind, per
margin bucket, by length, by position) must be that count over its pairs, written
here plainly; the breakdowns must partition the pairs they cover.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from datasets import Dataset
from hypothesis import given, settings
from hypothesis import strategies as st

from preflab.training.reward_eval.bench import bench, compare
from preflab.training.reward_eval.pairs import PairFacts
from preflab.training.reward_eval.score import Scored
from tests.properties import examples

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

CATEGORIES = ("chat", "math", "safety", "import:hh-rlhf")
KINDS = ("human", "ai", "mixed")


@st.composite
def held_out(draw):
    """Pairs with verdicts (ties included), prompts, categories, kinds, margins and reply lengths."""
    n = draw(st.integers(1, 40))
    whole = draw(st.booleans())
    margin = st.integers(1, 5).map(float) if whole else st.floats(0.01, 9.0, allow_nan=False)
    return {
        "gap": draw(st.lists(st.sampled_from([-2.0, -0.5, 0.0, 0.0, 0.25, 1.0, 3.0]), min_size=n, max_size=n)),
        "first": draw(st.lists(st.sampled_from([-1.0, 0.0, 1.0]), min_size=n, max_size=n)),
        "second": draw(st.lists(st.sampled_from([-1.0, 0.0, 1.0]), min_size=n, max_size=n)),
        "prompt": draw(st.lists(st.integers(0, 9), min_size=n, max_size=n)),
        "category": draw(st.lists(st.sampled_from(CATEGORIES), min_size=n, max_size=n)),
        "kind": draw(st.lists(st.sampled_from(KINDS), min_size=n, max_size=n)),
        "margin": draw(st.lists(st.one_of(margin, st.just(math.nan)), min_size=n, max_size=n)),
        "chosen": draw(st.lists(st.integers(0, 6), min_size=n, max_size=n)),
        "rejected": draw(st.lists(st.integers(0, 6), min_size=n, max_size=n)),
    }


def facts(data) -> PairFacts:
    return PairFacts(
        prompt_ids=np.array(data["prompt"]),
        categories=np.array(data["category"], dtype=object),
        annotator_kinds=np.array(data["kind"], dtype=object),
        margins=np.array(data["margin"], dtype=float),
    )


def split(data) -> Dataset:
    return Dataset.from_dict(
        {
            "prompt": ["q"] * len(data["gap"]),
            "chosen": ["c" * n for n in data["chosen"]],
            "rejected": ["r" * n for n in data["rejected"]],
        }
    )


def count(data, where) -> tuple[float | None, int, int]:
    """(accuracy, pairs, prompts) of the pairs `where` holds, counted one pair at a time."""
    picked = [i for i in range(len(data["gap"])) if where(i)]
    right = sum(data["gap"][i] > 0 for i in picked)
    return (right / len(picked) if picked else None), len(picked), len({data["prompt"][i] for i in picked})


def check_rows(rows, data, member) -> None:
    for row in rows:
        accuracy, pairs, prompts = count(data, lambda i, g=row["group"]: member(i) == g)
        assert (row["accuracy"], row["pairs"], row["prompts"]) == (pytest.approx(accuracy), pairs, prompts), row
        assert (row["low"] is None) == (prompts < 5)
    assert [(-r["pairs"], r["group"]) for r in rows] == sorted((-r["pairs"], r["group"]) for r in rows)


@settings(max_examples=examples(100))
@given(held_out())
def test_every_accuracy_is_a_direct_count_of_strict_wins(data):
    report = bench(Scored("rm", "reward", np.array(data["gap"])), facts(data), split(data), rounds=50)
    n = len(data["gap"])
    accuracy, _, prompts = count(data, lambda i: True)
    assert (report["accuracy"], report["pairs"], report["prompts"]) == (pytest.approx(accuracy), n, prompts)
    assert report["ties"] == sum(g == 0 for g in data["gap"])

    check_rows(report["by_category"], data, lambda i: data["category"][i])
    assert {r["group"] for r in report["by_category"]} == set(data["category"])
    check_rows(report["by_annotator_kind"], data, lambda i: data["kind"][i])
    assert {r["group"] for r in report["by_annotator_kind"]} == set(data["kind"])

    known = [i for i in range(n) if not math.isnan(data["margin"][i])]
    buckets = report["by_margin"]
    assert sum(r["pairs"] for r in buckets) == len(known)  # the buckets partition the pairs with a margin
    right = sum(data["gap"][i] > 0 for i in known)
    assert sum(r["accuracy"] * r["pairs"] for r in buckets) == pytest.approx(right)
    if all(data["margin"][i] == int(data["margin"][i]) for i in known):
        check_rows(sorted(buckets, key=lambda r: (-r["pairs"], r["group"])), data, lambda i: _whole(data["margin"][i]))

    shorter, longer = report["length_bias"]["rows"]
    assert (shorter["accuracy"], shorter["pairs"]) == pytest.approx(
        count(data, lambda i: data["chosen"][i] < data["rejected"][i])[:2]
    )
    assert (longer["accuracy"], longer["pairs"]) == pytest.approx(
        count(data, lambda i: data["chosen"][i] > data["rejected"][i])[:2]
    )
    assert report["length_bias"]["same_length"] == sum(c == r for c, r in zip(data["chosen"], data["rejected"]))


def _whole(margin: float) -> str | None:
    if math.isnan(margin):
        return None
    return "3+" if margin >= 3 else str(int(margin))


@settings(max_examples=examples(100))
@given(held_out())
def test_a_pair_rankers_position_and_a_comparison_are_direct_counts(data):
    n = len(data["gap"])
    first, second = np.array(data["first"]), np.array(data["second"])
    ranker = Scored("pr", "pair-ranker", np.array(data["gap"]), first=first, second=second)
    position = bench(ranker, facts(data), split(data), rounds=0)["position"]
    assert position["chosen_shown_first"]["accuracy"] == pytest.approx(sum(f > 0 for f in data["first"]) / n)
    assert position["chosen_shown_second"]["accuracy"] == pytest.approx(sum(s < 0 for s in data["second"]) / n)
    same_place = sum((f > 0) == (s > 0) for f, s in zip(data["first"], data["second"]))
    assert position["order_decides"] == pytest.approx(same_place / n)
    both_first = sum(f > 0 and s > 0 for f, s in zip(data["first"], data["second"]))
    assert position["first_shown_wins"] == pytest.approx(both_first / n)

    other = Scored("rm", "reward", -np.array(data["gap"]) + 0.5)
    result = compare(ranker, other, facts(data), rounds=0)
    mine = [g > 0 for g in data["gap"]]
    theirs = [0.5 - g > 0 for g in data["gap"]]
    assert result["difference"] == pytest.approx((sum(mine) - sum(theirs)) / n)
    assert result["both_right"] == sum(a and b for a, b in zip(mine, theirs))
    assert result["only_this"] == sum(a and not b for a, b in zip(mine, theirs))
    assert result["only_other"] == sum(b and not a for a, b in zip(mine, theirs))
    assert result["both_wrong"] == sum(not a and not b for a, b in zip(mine, theirs))


def test_pairs_with_no_margin_give_no_margin_rows():
    """An export without margins (all None) stopped the bench with a ValueError in the bootstrap."""
    data = {"gap": [1.0, -1.0, 1.0], "prompt": [0, 1, 2], "category": ["chat"] * 3, "kind": ["human"] * 3}
    data |= {"margin": [math.nan] * 3, "chosen": [1, 2, 3], "rejected": [3, 2, 1]}
    report = bench(Scored("rm", "reward", np.array(data["gap"])), facts(data), split(data), rounds=100)
    assert report["by_margin"] == [] and report["accuracy"] == pytest.approx(2 / 3)


def test_few_distinct_margins_give_no_empty_or_mislabelled_bucket():
    """Terciles of 0.5, 0.5, 0.5 and 1.5 cut twice at 0.5: the 1.5 pair was counted in a bucket named "0.5"."""
    from preflab.training.reward_eval.bench import margin_buckets

    buckets = margin_buckets(np.array([0.5, 0.5, 0.5, 1.5]))
    assert [(name, int(mask.sum())) for name, mask in buckets] == [("≤ 0.5", 3), ("> 0.5", 1)]
    assert all(mask.any() for _, mask in margin_buckets(np.array([1.0, 0.5, np.nan])))
