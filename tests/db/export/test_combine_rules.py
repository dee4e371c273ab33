"""`export --combine RULE`: a rule parsed once, with one sentence for a bad one, and one prompt combined by it.

The per-prompt combination is checked against a plain reading of each rule written here (`reference`):
every candidate pair compared by hand, not by the tiers the rule module builds.
"""

from __future__ import annotations

from collections import Counter
from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preflab.db.export.rules import (
    AGREE,
    DISAGREE,
    LEXICOGRAPHIC,
    NOT_RANKED,
    TIED,
    TOLERANCE,
    WEIGHTED,
    CombineRule,
    combine_prompt,
    parse_rule,
)
from preflab.errors import InputError
from tests.properties import examples


def test_rules_parse_into_one_small_dataclass():
    assert parse_rule("mean") == CombineRule("mean")
    assert parse_rule(" mean:helpfulness,honesty ") == CombineRule("mean", ("helpfulness", "honesty"), (0.5, 0.5))
    weighted = parse_rule("weighted:helpfulness=0.7,harmlessness=0.3")
    assert weighted.criteria == ("helpfulness", "harmlessness")
    assert weighted.weights == pytest.approx((0.7, 0.3))
    assert weighted.text == "weighted:helpfulness=0.7,harmlessness=0.3"
    assert parse_rule("weighted:a=7,b=3").weights == pytest.approx((0.7, 0.3))  # normalised to sum to 1
    assert parse_rule("weighted:a=1,b=0") == CombineRule("weighted", ("a",), (1.0,))  # weight 0: left out
    assert parse_rule("lexicographic:harmlessness,helpfulness").criteria == ("harmlessness", "helpfulness")
    assert parse_rule("agree") == CombineRule("agree")
    assert parse_rule("agree").over(["b", "a"]).criteria == ("a", "b")
    assert parse_rule("mean").over(["b", "a"]).weights == (0.5, 0.5)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "median",
            "unknown --combine rule 'median' (expected mean, weighted:helpfulness=0.7,harmlessness=0.3, "
            "lexicographic:harmlessness,helpfulness or agree)",
        ),
        ("", "unknown --combine rule '' (expected"),
        (
            "weighted",
            "--combine weighted needs each criterion's weight, as weighted:helpfulness=0.7,harmlessness=0.3",
        ),
        ("weighted:helpfulness", "--combine weighted:helpfulness: 'helpfulness' has no weight (write helpfulness=0.5)"),
        (
            "weighted:helpfulness=lots,harmlessness=0.3",
            "--combine weighted:helpfulness=lots,harmlessness=0.3: the weight of helpfulness must be a number, "
            "not 'lots'",
        ),
        ("weighted:a=nan", "--combine weighted:a=nan: the weight of a must be a number ≥ 0, not nan"),
        ("weighted:a=-1,b=2", "--combine weighted:a=-1,b=2: the weight of a must be a number ≥ 0, not -1"),
        ("weighted:a=0,b=0", "--combine weighted:a=0,b=0: the weights must sum to a positive number"),
        ("weighted:a=1,a=2", "--combine weighted:a=1,a=2 names criterion 'a' twice"),
        ("weighted:Help=1", "--combine weighted:Help=1: 'Help' must be a criterion's short name"),
        (
            "lexicographic",
            "--combine lexicographic needs its criteria, the first deciding, as lexicographic:harmlessness,helpfulness",
        ),
        ("lexicographic:a,,b", "--combine lexicographic:a,,b: an empty criterion in its list"),
        ("agree:a,a", "--combine agree:a,a names criterion 'a' twice"),
    ],
)
def test_a_bad_rule_is_one_sentence(text, message):
    with pytest.raises(InputError) as caught:
        parse_rule(text)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_a_rule_naming_a_criterion_the_pairs_do_not_hold_says_which_they_hold():
    with pytest.raises(InputError) as caught:
        parse_rule("lexicographic:harmlesness,helpfulness").over(["harmlessness", "helpfulness"])
    assert str(caught.value) == (
        "--combine lexicographic:harmlesness,helpfulness names criterion 'harmlesness', which the pairs to export "
        "do not hold (they hold harmlessness, helpfulness)"
    )


# --- one prompt: known answers ---------------------------------------------------------------------------

# A: helpful but unsafe; B: safe and helpful; C: safe, less helpful; D: neither.
A, B, C, D = 1, 2, 3, 4
SAFE = {B: 1.0, C: 1.0, A: 0.0, D: 0.0}  # harmlessness: B, C tied above A, D
HELPFUL = {A: 1.0, B: 2 / 3, C: 1 / 3, D: 0.0}


def pairs_of(rule: str, scores, strategy: str = "all"):
    made, dropped = combine_prompt(parse_rule(rule).over(sorted(scores)), scores, strategy)
    return [(a, b) for a, b, _ in made], dropped


def test_lexicographic_puts_safety_first_and_helpfulness_among_the_safe():
    made, dropped = pairs_of("lexicographic:harmlessness,helpfulness", {"harmlessness": SAFE, "helpfulness": HELPFUL})
    assert made == [(B, C), (B, A), (B, D), (C, A), (C, D), (A, D)]
    assert dropped == Counter()
    made, _ = pairs_of("lexicographic:helpfulness,harmlessness", {"harmlessness": SAFE, "helpfulness": HELPFUL})
    assert made[:3] == [(A, B), (A, C), (A, D)]  # the other order of priorities: the helpful, unsafe reply wins


def test_mean_weighted_and_agree_on_the_conflict():
    both = {"harmlessness": SAFE, "helpfulness": HELPFUL}
    # means: B 5/6, C 2/3, A 1/2, D 0
    assert pairs_of("mean", both)[0] == [(B, C), (B, A), (B, D), (C, A), (C, D), (A, D)]
    # helpfulness × 0.9: A 0.9, B 0.7, C 0.4, D 0
    assert pairs_of("weighted:helpfulness=0.9,harmlessness=0.1", both)[0][:3] == [(A, B), (A, C), (A, D)]
    made, dropped = pairs_of("agree", both)
    assert sorted(made) == [(B, D), (C, D)]  # the only pairs both criteria order alike, strictly
    # B over A and C over A: safety says yes, helpfulness no; A over D and B over C: safety ties them
    assert dropped == Counter({DISAGREE: 4})


def test_combined_ties_and_missing_criteria_are_dropped_by_why():
    # x: 1 over 3 over 2; y: 2 over 1; 3 is ranked by x only.
    scores = {"x": {1: 1.0, 2: 0.0, 3: 0.5}, "y": {1: 0.0, 2: 1.0}}
    made, dropped = pairs_of("mean", scores)
    assert made == [] and dropped == Counter({TIED: 1, NOT_RANKED: 2})  # 1 and 2 tie at 0.5; 3: not ranked by y
    made, dropped = pairs_of("lexicographic:x,y", scores)
    assert made == [(1, 2)] and dropped == Counter({NOT_RANKED: 2})


@pytest.mark.parametrize("name", ["mean", "agree"])
def test_a_rule_over_a_store_whose_rankings_order_nothing_makes_nothing(name):
    # every ranking one tie: no criterion holds a pair, so the rule has no criteria to combine
    assert combine_prompt(parse_rule(name).over([]), {}) == ([], Counter())
    assert combine_prompt(parse_rule(name).over(["x"]), {"x": {1: 0.5, 2: 0.5}}) == ([], Counter())


# --- one prompt: against a plain reading of each rule ------------------------------------------------------


def reference(rule: CombineRule, scores, strategy_all=True) -> tuple[set, Counter]:
    """Each rule read plainly, a candidate pair at a time (strategy `all`)."""

    def sign(c, a, b) -> int:
        gap = scores[c][a] - scores[c][b]
        return 0 if abs(gap) <= TOLERANCE else (1 if gap > 0 else -1)

    everyone = sorted({i for s in scores.values() for i in s})
    kept, dropped = set(), Counter()
    for a, b in combinations(everyone, 2):
        ranked = [c for c in rule.criteria if a in scores.get(c, {}) and b in scores.get(c, {})]
        signs = {c: sign(c, a, b) for c in scores if a in scores[c] and b in scores[c]}
        if not any(signs.get(c) for c in rule.criteria):
            continue  # no criterion of the rule orders them: nothing to keep or drop
        if len(ranked) < len(rule.criteria):
            dropped[NOT_RANKED] += 1
            continue
        if rule.name == AGREE:
            verdict = signs[rule.criteria[0]] if len({signs[c] for c in rule.criteria}) == 1 else 0
            why = DISAGREE
        elif rule.name == LEXICOGRAPHIC:
            verdict = next((signs[c] for c in rule.criteria if signs[c]), 0)
            why = TIED
        else:
            weights = rule.weights if rule.name == WEIGHTED else [1 / len(rule.criteria)] * len(rule.criteria)
            gap = sum(w * (scores[c][a] - scores[c][b]) for c, w in zip(rule.criteria, weights))
            verdict = 0 if abs(gap) <= TOLERANCE else (1 if gap > 0 else -1)
            why = TIED
        if verdict:
            kept.add((a, b) if verdict > 0 else (b, a))
        else:
            dropped[why] += 1
    return kept, dropped


# Borda scores of 0 to 4 candidates in quarters, as a ranking of five gives them; no two near-equal but unequal.
quarter_scores = st.dictionaries(st.integers(1, 5), st.integers(0, 4).map(lambda q: q / 4), max_size=5)


@settings(max_examples=examples(300))
@given(
    st.dictionaries(st.sampled_from(["helpfulness", "harmlessness", "honesty"]), quarter_scores, min_size=1),
    st.sampled_from(["mean", "agree", "lexicographic:", "weighted:"]),
    st.data(),
)
def test_one_prompt_combined_is_each_rules_plain_reading(scores, name, data):
    criteria = data.draw(st.permutations(sorted(scores)))
    if name == "lexicographic:":
        name += ",".join(criteria)
    elif name == "weighted:":
        weights = data.draw(st.lists(st.integers(1, 4), min_size=len(criteria), max_size=len(criteria)))
        name += ",".join(f"{c}={w}" for c, w in zip(criteria, weights))
    rule = parse_rule(name).over(sorted(scores))
    if name.startswith("weighted:"):  # the weights as given, over their sum
        assert dict(zip(rule.criteria, rule.weights)) == pytest.approx(
            {c: w / sum(weights) for c, w in zip(criteria, weights)}
        )
    made, dropped = combine_prompt(rule, scores)
    want_pairs, want_dropped = reference(rule, scores)
    assert {(a, b) for a, b, _ in made} == want_pairs
    assert len(made) == len(want_pairs)  # one pair per candidate pair
    assert all(margin > 0 for *_, margin in made)
    assert dropped == want_dropped
