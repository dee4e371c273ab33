"""The laws of `export --combine`, on generated stores of rankings by several criteria, on SQLite and Postgres.

- A rule of one criterion is that criterion: `weighted:X=1` and `lexicographic:X` write the pairs
  `--criterion X` writes, where X's rankings are one per prompt (several are combined by Borda first).
- `agree` writes only pairs every criterion's export holds.
- Renaming the criteria (and the rule with them) changes nothing; nor does the order the rankings were stored in.
- `mean` of two identical criteria is either one.

Pairs are compared as sets of (prompt, chosen, rejected) texts; a store is emptied between examples.
"""

from __future__ import annotations

import re
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from preflab.db.export.selection import held_criteria
from preflab.db.pairs.build import STRATEGIES
from tests.db.export.criteria_store import (
    combined,
    criterion_pairs,
    renamed,
    stored,
    stores,
)
from tests.properties import examples

RULES = ("mean", "agree", "weighted:harmlessness=2,helpfulness=1", "lexicographic:helpfulness,harmlessness")


def held(sessions, annotators: str = "human-first") -> list[str]:
    with sessions.begin() as s:
        return held_criteria(s, annotators)


@settings(max_examples=examples(12))
@given(stores(one_each=("helpfulness",)), st.sampled_from(STRATEGIES))
def test_a_rule_of_one_criterion_is_that_criterion(sessions, tmp_path, rankings, strategy):
    stored(sessions, tmp_path, rankings, strategy=strategy)
    if "helpfulness" not in held(sessions):
        return  # no pair of it: both --criterion and the rule refuse (tested by the command's tests)
    want = criterion_pairs(sessions, "helpfulness")
    assert len(want) == len(set(want))  # one ranking a prompt: no pair twice
    for rule in ("weighted:helpfulness=1", "lexicographic:helpfulness", "weighted:helpfulness=3,harmlessness=0"):
        pairs, dropped = combined(sessions, rule)
        assert sorted(pairs) == sorted(want), rule
        assert not dropped, rule


@settings(max_examples=examples(12))
@given(stores(), st.sampled_from(STRATEGIES))
def test_agree_holds_only_pairs_every_criterion_holds(sessions, tmp_path, rankings, strategy):
    # Each criterion's pairs as `pairs build --aggregate borda` makes them: its annotators combined, as a rule does.
    stored(sessions, tmp_path, rankings, aggregate="borda", strategy=strategy)
    criteria = held(sessions, "any")
    if not criteria:
        return
    agreed, dropped = combined(sessions, "agree", "any")
    assert len(agreed) == len(set(agreed))
    for criterion in criteria:
        assert set(agreed) <= set(criterion_pairs(sessions, criterion, "any")), criterion
    if len(criteria) == 1:  # one criterion agrees with itself
        assert sorted(agreed) == sorted(criterion_pairs(sessions, criteria[0], "any")) and not dropped


@settings(max_examples=examples(16))
@given(stores(), st.sampled_from(RULES), st.booleans())
def test_renaming_the_criteria_changes_nothing(sessions, tmp_path, rankings, rule, flip):
    stored(sessions, tmp_path, rankings)
    if not {"harmlessness", "helpfulness"} <= set(held(sessions)) and rule not in ("mean", "agree"):
        return
    want = combined(sessions, rule)
    # new names in the other order (or the two swapped): a rule must not lean on the names' order
    names = (
        {"harmlessness": "helpfulness", "helpfulness": "harmlessness"}
        if flip
        else {"harmlessness": "zeal", "helpfulness": "aptness"}
    )
    stored(sessions, tmp_path, renamed(rankings, names))
    again = re.sub(r"[a-z_]+", lambda word: names.get(word.group(), word.group()), rule)
    got = combined(sessions, again)
    assert sorted(got[0]) == sorted(want[0]) and got[1] == want[1]


@settings(max_examples=examples(10))
@given(stores(), st.sampled_from(RULES), st.randoms(use_true_random=False))
def test_the_order_rankings_were_stored_in_changes_nothing(sessions, tmp_path, rankings, rule, shuffle):
    stored(sessions, tmp_path, rankings)
    if not {"harmlessness", "helpfulness"} <= set(held(sessions)) and rule not in ("mean", "agree"):
        return
    want = combined(sessions, rule)
    again = list(rankings)
    shuffle.shuffle(again)
    stored(sessions, tmp_path, again)
    got = combined(sessions, rule)
    assert sorted(got[0]) == sorted(want[0]) and got[1] == want[1]


@settings(max_examples=examples(14))
@given(stores(criteria=("helpfulness",)), st.booleans())
def test_mean_of_two_identical_criteria_is_either_one(sessions, tmp_path, rankings, one_each):
    if one_each:  # then "either one" is also what --criterion exports
        first = {}
        for r in rankings:
            first.setdefault(r.prompt, r)
        rankings = list(first.values())
    twins = rankings + [replace(r, criterion="honesty", number=r.number + 1000) for r in rankings]
    stored(sessions, tmp_path, twins)
    if not held(sessions):
        return
    mean, dropped = combined(sessions, "mean")
    assert not dropped
    for alone in ("lexicographic:helpfulness", "lexicographic:honesty", "weighted:honesty=1"):
        assert sorted(mean) == sorted(combined(sessions, alone)[0]), alone
    if one_each:
        assert sorted(mean) == sorted(criterion_pairs(sessions, "helpfulness"))
        assert sorted(mean) == sorted(criterion_pairs(sessions, "honesty"))
