"""The reward bench's numbers on made-up verdicts, where the right answers are known."""

from __future__ import annotations

import numpy as np
import pytest
from datasets import Dataset

from preflab.training.reward_eval.bench import bench, compare, margin_buckets
from preflab.training.reward_eval.pairs import PairFacts
from preflab.training.reward_eval.score import Scored


def _facts(n, prompts=None, categories=None, kinds=None, margins=None):
    return PairFacts(
        prompt_ids=np.asarray(prompts if prompts is not None else range(n)),
        categories=np.array(categories or ["chat"] * n, dtype=object),
        annotator_kinds=np.array(kinds or ["human"] * n, dtype=object),
        margins=np.asarray(margins if margins is not None else [1.0] * n, dtype=float),
    )


def _split(chosen, rejected):
    return Dataset.from_dict({"prompt": ["q"] * len(chosen), "chosen": chosen, "rejected": rejected})


def test_strict_scoring_counts_a_tie_as_wrong():
    scored = Scored("rm", "reward", gap=np.array([1.0, 0.0, -1.0, 2.0]))
    report = bench(scored, _facts(4), _split(["a", "b", "c", "d"], ["w", "x", "y", "z"]), rounds=0)
    assert report["accuracy"] == 0.5 and report["ties"] == 1 and report["pairs"] == 4


def test_a_model_that_loves_length_shows_its_bias():
    rng = np.random.default_rng(0)
    chosen = ["x" * int(n) for n in rng.integers(1, 60, 300)]
    rejected = ["y" * int(n) for n in rng.integers(1, 60, 300)]
    gap = np.array([len(c) - len(r) for c, r in zip(chosen, rejected)], dtype=float)  # the longer reply wins
    report = bench(Scored("rm", "reward", gap), _facts(300), _split(chosen, rejected), rounds=200)
    shorter, longer = report["length_bias"]["rows"]
    assert (shorter["group"], shorter["accuracy"]) == ("chosen is shorter", 0.0)
    assert (longer["group"], longer["accuracy"]) == ("chosen is longer", 1.0)
    assert report["length_bias"]["gap"] == 1.0
    assert shorter["pairs"] + longer["pairs"] + report["length_bias"]["same_length"] == 300
    assert report["position"]["applies"] is False


def test_breakdowns_by_category_kind_and_margin():
    gap = np.array([1, 1, -1, 1, -1, -1, 1, 1], dtype=float)
    facts = _facts(
        8,
        prompts=[0, 0, 0, 1, 1, 1, 2, 3],
        categories=["math"] * 6 + ["chat"] * 2,
        kinds=["human"] * 3 + ["ai"] * 5,
        margins=[1, 2, 1, 1, 3, 4, 1, 2],
    )
    report = bench(Scored("rm", "reward", gap), facts, _split(list("abcdefgh"), list("ABCDEFGH")), rounds=100)
    by = {
        key: {row["group"]: (row["accuracy"], row["pairs"]) for row in report[key]}
        for key in ("by_category", "by_annotator_kind", "by_margin")
    }
    assert by["by_category"] == {"math": (0.5, 6), "chat": (1.0, 2)}
    assert [row["group"] for row in report["by_category"]] == ["math", "chat"]  # the largest first
    assert by["by_annotator_kind"] == {"ai": (0.6, 5), "human": (2 / 3, 3)}
    assert by["by_margin"] == {"1": (0.75, 4), "2": (1.0, 2), "3+": (0.0, 2)}
    assert report["prompts"] == 4


def test_margin_buckets_of_score_gaps_are_terciles():
    margins = np.linspace(0.1, 0.9, 9)
    names = [name for name, _ in margin_buckets(margins)]
    assert len(names) == 3 and sum(mask.sum() for _, mask in margin_buckets(margins)) == 9
    assert margin_buckets(np.array([np.nan, np.nan])) == []


def test_a_pair_ranker_that_follows_position_is_caught():
    """s(first, second) > 0 whatever is shown: right only when chosen is shown first."""
    n = 100
    first, second = np.full(n, 1.0), np.full(n, 1.0)
    scored = Scored("ranker", "pair-ranker", gap=np.zeros(n) - 0.0, first=first, second=second)
    report = bench(scored, _facts(n), _split(["a"] * n, ["bb"] * n), rounds=100)
    position = report["position"]
    assert position["applies"] and position["chosen_shown_first"]["accuracy"] == 1.0
    assert position["chosen_shown_second"]["accuracy"] == 0.0
    assert position["order_decides"] == 1.0 and position["first_shown_wins"] == 1.0
    assert report["accuracy"] == 0.0  # antisymmetrised, it cannot tell them apart: P = ½ is a tie


def test_compare_two_models_on_the_same_pairs():
    rng = np.random.default_rng(5)
    n = 400
    good = Scored("rm-2", "reward", gap=np.where(rng.random(n) < 0.9, 1.0, -1.0))
    poor = Scored("rm-1", "reward", gap=np.where(rng.random(n) < 0.6, 1.0, -1.0))
    result = compare(good, poor, _facts(n, prompts=np.arange(n) // 2), rounds=500)
    assert result["model_version"] == "rm-2" and result["other"] == "rm-1" and result["prompts"] == 200
    assert result["difference"] == pytest.approx(result["accuracy"]["accuracy"] - result["other_accuracy"]["accuracy"])
    assert result["low"] > 0 and result["p_value"] < 0.01
