"""Cluster-bootstrap intervals over prompts, on made-up verdicts where the right answers are known."""

from __future__ import annotations

import numpy as np
import pytest

from preflab.db.quality.intervals import Resampler, paired_difference


def test_intervals_are_seeded_and_hold_the_estimate():
    rng = np.random.default_rng(1)
    right = rng.random(600) < 0.7
    prompts = np.repeat(np.arange(200), 3)  # three pairs per prompt: one ranking of three replies
    first = Resampler(prompts, 1000, seed=0).cells(right, [None])[0]
    again = Resampler(prompts, 1000, seed=0).cells(right, [None])[0]
    other = Resampler(prompts, 1000, seed=1).cells(right, [None])[0]
    assert first == again and (first.low, first.high) != (other.low, other.high)
    assert first.low < first.value < first.high and first.pairs == 600
    assert first.value == pytest.approx(right.mean())
    # About ±1.96 standard errors of a share over 200 independent prompts of 3 pairs.
    assert 0.06 < first.high - first.low < 0.12


def test_the_bootstrap_resamples_prompts_not_pairs():
    """Pairs of one prompt that are all right or all wrong together: the interval is as wide as the prompts allow."""
    prompts = np.repeat(np.arange(40), 10)
    right = np.repeat(np.arange(40) % 2 == 0, 10)  # 20 prompts wholly right, 20 wholly wrong
    by_prompt = Resampler(prompts, 2000, seed=0).cells(right, [None])[0]
    by_pair = Resampler(np.arange(400), 2000, seed=0).cells(right, [None])[0]
    assert by_prompt.high - by_prompt.low > 2.5 * (by_pair.high - by_pair.low)


def test_coverage_of_a_known_accuracy():
    """Over 200 simulated held-out sets, the 95% interval holds the true accuracy 90–99% of the time."""
    rng = np.random.default_rng(7)
    truth, held = 0.8, 0
    for trial in range(200):
        right = rng.random(300) < truth
        cell = Resampler(np.arange(300), 400, seed=trial).cells(right, [None])[0]
        held += cell.low <= truth <= cell.high
    assert 0.90 <= held / 200 <= 0.99, held


def test_no_rounds_gives_estimates_without_intervals():
    cell = Resampler(np.arange(4), 0).cells(
        np.array([1, 1, 0, 1]), [None, np.array([True, False, False, False]), np.zeros(4, dtype=bool)]
    )
    assert cell[0].as_dict() == {"accuracy": 0.75, "low": None, "high": None, "pairs": 4, "prompts": 4}
    assert cell[1].value == 1.0 and cell[2].as_dict() == {
        "accuracy": None,
        "low": None,
        "high": None,
        "pairs": 0,
        "prompts": 0,
    }


def test_too_few_prompts_give_no_interval():
    """Three pairs of one prompt, all right, are not certainty: under five prompts there is no interval."""
    resampler = Resampler(np.array([0, 0, 0, 1, 2, 3, 4, 5]), 200, seed=0)
    one, six = resampler.cells(np.ones(8), [np.arange(8) < 3, None])
    assert (one.value, one.low, one.high, one.prompts) == (1.0, None, None, 1)
    assert (six.low, six.high, six.prompts) == (1.0, 1.0, 6)
    few = paired_difference(Resampler(np.arange(3), 200), np.array([1, 1, 1]), np.array([0, 0, 0]))
    assert few["difference"] == 1.0 and few["low"] is None and few["p_value"] is None


def test_the_p_value_counts_the_far_side_of_the_observed_difference():
    """A is right on 3 more prompts' pairs than B out of 40: p counts the rounds at or below 0, doubled."""
    a = np.ones(40, dtype=bool)
    b = np.ones(40, dtype=bool)
    b[:3] = False
    resampler = Resampler(np.arange(40), 2000, seed=0)
    result = paired_difference(resampler, a, b)
    rounds = resampler.estimates([(a.astype(float) - b.astype(float), None)])[:, 0]
    assert result["p_value"] == pytest.approx(2 * ((rounds <= 0).sum() + 1) / 2001)
    flipped = paired_difference(resampler, b, a)
    assert flipped["difference"] == -result["difference"] and flipped["p_value"] == result["p_value"]


def test_paired_difference_finds_a_real_gap_and_none_where_there_is_none():
    rng = np.random.default_rng(3)
    prompts = np.arange(500)
    a = rng.random(500) < 0.85
    b = a.copy()
    flip = rng.choice(500, 60, replace=False)
    b[flip] = False  # b is a, wrong on 60 more pairs (some of which a got wrong too)
    result = paired_difference(Resampler(prompts, 1000, seed=0), a, b)
    assert result["difference"] == pytest.approx(a.mean() - b.mean()) and result["difference"] > 0.05
    assert 0 < result["low"] <= result["difference"] <= result["high"] and result["p_value"] < 0.01
    assert result["both_right"] + result["only_this"] + result["only_other"] + result["both_wrong"] == 500
    assert result["only_other"] == 0 and result["only_this"] == int((a & ~b).sum())
    same = paired_difference(Resampler(prompts, 1000, seed=0), a, a)
    assert same["difference"] == 0 and same["p_value"] == 1.0


def test_coverage_of_a_known_accuracy_where_a_prompts_pairs_move_together():
    """Each prompt has a difficulty of its own (Beta(3, 1) around a true 0.75) and 1–10 pairs that share it.

    Over 300 simulated held-out sets of 50 prompts, the 95% interval that resamples prompts holds the
    truth 90–99% of the time; one that resampled pairs would claim too much (below 88%). The judges'
    board (`trust.agreement_interval`, per-prompt counts) is the same interval.
    """
    from preflab.labelling.judges.trust import agreement_interval

    rng = np.random.default_rng(11)
    truth, trials, prompts = 0.75, 300, 50
    held = {"prompts": 0, "pairs": 0, "judges": 0}
    for trial in range(trials):
        difficulty = rng.beta(3.0, 1.0, prompts)
        sizes = rng.choice([1, 3, 6, 10], prompts)  # rankings of 2 to 5 replies
        ids = np.repeat(np.arange(prompts), sizes)
        right = rng.random(len(ids)) < difficulty[ids]
        by_prompt = Resampler(ids, 400, seed=trial).cells(right, [None])[0]
        by_pair = Resampler(np.arange(len(ids)), 400, seed=trial).cells(right, [None])[0]
        low, high = agreement_interval([[int(n), int(right[ids == i].sum())] for i, n in enumerate(sizes)], 400, trial)
        held["prompts"] += by_prompt.low <= truth <= by_prompt.high
        held["pairs"] += by_pair.low <= truth <= by_pair.high
        held["judges"] += low <= truth <= high
    assert 0.90 <= held["prompts"] / trials <= 0.99, held
    assert held["judges"] == held["prompts"]
    assert held["pairs"] / trials < 0.88, held
