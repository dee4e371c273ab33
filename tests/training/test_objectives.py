"""A multi-objective reward model's scores combined by the export's rules (`preflab.training.objectives`), and its loss.

The laws, on generated score vectors, against an independent implementation (tiers counted by hand, Borda
scores from `scipy.stats.rankdata`):

- `margin_tiers`: a tier holds the scores within the margin of its best; the next tier starts below that;
- `combine_group` orders a group as its rule orders the heads' tiers: lexicographically (the first head's tier,
  then the next…), by the weighted mean of each head's Borda score, or by the pairs every head agrees on;
- candidates are scored within their own group, whatever order they come in.

And, with a real (tiny) model: `head_scores` is each head's output, and `head_loss` is Bradley–Terry on each
pair's own head.
"""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import rankdata

from preflab.db.export.heads import combine_group, combine_scores, heads_rule, margin_tiers
from preflab.errors import InputError
from tests.properties import examples

HEADS = ("harmlessness", "helpfulness", "honesty")
# Scores on a coarse grid, so that exact ties and near ties within a margin both occur.
SCORE = st.sampled_from([-3.0, -2.5, -1.0, -0.4, 0.0, 0.3, 0.9, 1.0, 2.2, 4.0])
MARGINS = st.sampled_from([0.0, 0.5, 1.0, 2.0])


@st.composite
def groups(draw):
    """(criteria, one group's vectors, a rule over some of the criteria, a tie margin)."""
    k = draw(st.integers(1, 3))
    criteria = list(HEADS[:k])
    n = draw(st.integers(1, 7))
    vectors = [[draw(SCORE) for _ in criteria] for _ in range(n)]
    used = draw(st.permutations(criteria).flatmap(lambda p: st.integers(1, len(p)).map(lambda m: p[:m])))
    kind = draw(st.sampled_from(["mean", "weighted", "lexicographic", "agree"]))
    if kind == "weighted":
        weights = [draw(st.integers(1, 4)) for _ in used]
        text = "weighted:" + ",".join(f"{c}={w}" for c, w in zip(used, weights))
    else:
        text = f"{kind}:{','.join(used)}"
    return criteria, vectors, text, draw(MARGINS)


def tier_index(scores: list[float], margin: float) -> list[int]:
    """Each score's tier, counted by hand: a tier starts at the best score not yet placed and takes all within
    `margin` of it."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    out, tier, top = [0] * len(scores), -1, None
    for i in order:
        if top is None or top - scores[i] > margin:
            tier, top = tier + 1, scores[i]
        out[i] = tier
    return out


def borda_of(badness: list) -> list[float]:
    """Normalised Borda scores from any comparable badness (lower is better; equal ties), by average ranks."""
    n = len(badness)
    if n < 2:
        return [0.5] * n
    values = np.array(badness, dtype=float) if not isinstance(badness[0], tuple) else None
    if values is None:  # tuples (lexicographic keys): rank them through their sorted distinct order
        distinct = sorted(set(badness))
        values = np.array([distinct.index(b) for b in badness], dtype=float)
    return list((rankdata(-values, method="average") - 1) / (n - 1))


def expected(criteria, vectors, text, margin) -> list[float]:
    rule = heads_rule(text, criteria)
    n = len(vectors)
    tiers = {c: tier_index([v[criteria.index(c)] for v in vectors], margin) for c in rule.criteria}
    if rule.name == "lexicographic":
        return borda_of([tuple(tiers[c][i] for c in rule.criteria) for i in range(n)])
    if rule.name in ("mean", "weighted"):
        per = {c: borda_of(tiers[c]) for c in rule.criteria}
        value = [sum(w * per[c][i] for c, w in zip(rule.criteria, rule.weights)) for i in range(n)]
        # The combined order ties values closer than the export's tolerance.
        rounded = [round(v, 9) for v in value]
        return borda_of([-v for v in rounded])
    # agree: i beats j when every criterion puts i in a better tier
    if n < 2:
        return [0.5] * n
    wins = [sum(all(tiers[c][i] < tiers[c][j] for c in rule.criteria) for j in range(n)) for i in range(n)]
    losses = [sum(all(tiers[c][j] < tiers[c][i] for c in rule.criteria) for j in range(n)) for i in range(n)]
    return [(wins[i] + 0.5 * (n - 1 - wins[i] - losses[i])) / (n - 1) for i in range(n)]


@settings(max_examples=examples(200))
@given(st.lists(SCORE, min_size=1, max_size=9), MARGINS)
def test_margin_tiers_hold_the_scores_within_the_margin_of_their_best(scores, margin):
    tiers = margin_tiers(dict(enumerate(scores)), margin)
    assert sorted(i for tier in tiers for i in tier) == list(range(len(scores)))
    tops = [max(scores[i] for i in tier) for tier in tiers]
    for top, tier in zip(tops, tiers):
        assert all(top - scores[i] <= margin for i in tier)
    assert all(later < earlier - margin for earlier, later in itertools.pairwise(tops))
    by_hand = tier_index(scores, margin)
    assert [sorted(tier) for tier in tiers] == [
        [i for i in range(len(scores)) if by_hand[i] == k] for k in range(max(by_hand) + 1)
    ]


@settings(max_examples=examples(300))
@given(groups())
def test_a_group_is_ordered_as_its_rule_orders_the_heads_tiers(case):
    criteria, vectors, text, margin = case
    got = combine_group(heads_rule(text, criteria), criteria, vectors, margin)
    assert got == pytest.approx(expected(criteria, vectors, text, margin), abs=1e-9), text
    assert all(0 <= s <= 1 for s in got)


@settings(max_examples=examples(100))
@given(st.lists(groups(), min_size=1, max_size=3), st.randoms(use_true_random=False))
def test_candidates_are_scored_within_their_own_group_whatever_their_order(cases, rng):
    criteria = list(HEADS)
    text, margin = cases[0][2], cases[0][3]
    rule = heads_rule(text, cases[0][0])
    rows = []  # (group, vector padded to every head)
    for g, (heads, vectors, _, _) in enumerate(cases):
        for v in vectors:
            rows.append((g, [v[heads.index(c)] if c in heads else 0.0 for c in criteria]))
    order = list(range(len(rows)))
    rng.shuffle(order)
    shuffled = [rows[i] for i in order]
    got = combine_scores(rule, criteria, [v for _, v in shuffled], [g for g, _ in shuffled], margin)
    for g in range(len(cases)):
        alone = combine_group(rule, criteria, [v for h, v in rows if h == g], margin)
        mine = [score for (h, _), score in zip(shuffled, got) if h == g]
        positions = [i for i in order if rows[i][0] == g]
        by_row = dict(zip(positions, mine))
        assert [by_row[i] for i in sorted(by_row)] == pytest.approx(alone)


def test_safety_first_picks_the_most_helpful_of_the_safest():
    # (harmlessness, helpfulness): two safe replies that tie within the margin, the less safe one most helpful.
    vectors = [[4.0, -3.0], [3.6, 2.5], [-4.0, 5.0], [-4.2, -3.0]]
    criteria = ["harmlessness", "helpfulness"]
    scores = combine_group(heads_rule("lexicographic:harmlessness,helpfulness", criteria), criteria, vectors, 1.0)
    assert scores == [2 / 3, 1.0, 1 / 3, 0.0]
    # Strictly (no margin), the safer reply wins, whatever it does for helpfulness.
    strict = combine_group(heads_rule("lexicographic:harmlessness,helpfulness", criteria), criteria, vectors, 0.0)
    assert strict.index(max(strict)) == 0
    helpful_first = combine_group(heads_rule("lexicographic:helpfulness,harmlessness", criteria), criteria, vectors)
    assert helpful_first.index(max(helpful_first)) == 2


def test_a_rule_names_only_the_models_heads():
    with pytest.raises(InputError, match=r"names criterion 'honesty', which reward-3 has no head for \(its heads: "):
        heads_rule("lexicographic:honesty,helpfulness", ["harmlessness", "helpfulness"], "reward-3")
    assert heads_rule("mean", ["harmlessness", "helpfulness"]).criteria == ("harmlessness", "helpfulness")
    with pytest.raises(InputError, match="unknown --combine rule"):
        heads_rule("median", ["harmlessness"])


def test_head_loss_is_bradley_terry_on_each_pairs_own_head():
    import torch

    from preflab.training.multihead import head_loss

    rng = random.Random(0)
    pairs, k = 5, 3
    logits = torch.tensor([[rng.uniform(-3, 3) for _ in range(k)] for _ in range(2 * pairs)])
    head = torch.tensor([rng.randrange(k) for _ in range(pairs)])
    margin = torch.tensor([rng.uniform(0, 1) for _ in range(pairs)])
    chosen = [logits[i, head[i]].item() for i in range(pairs)]
    rejected = [logits[pairs + i, head[i]].item() for i in range(pairs)]

    def nll(x: float) -> float:
        return math.log1p(math.exp(-x))

    loss, gaps = head_loss(logits, head)
    assert gaps.tolist() == pytest.approx([c - r for c, r in zip(chosen, rejected)])
    assert loss.item() == pytest.approx(sum(nll(c - r) for c, r in zip(chosen, rejected)) / pairs)
    loss, _ = head_loss(logits, head, margin, center=0.01)
    want = sum(nll(c - r - m) for c, r, m in zip(chosen, rejected, margin.tolist())) / pairs
    want += 0.01 * sum((c + r) ** 2 for c, r in zip(chosen, rejected)) / pairs
    assert loss.item() == pytest.approx(want, rel=1e-5)


@pytest.mark.slow
def test_head_scores_are_each_heads_output_for_each_reply(tmp_path):
    import torch

    from preflab.lm.scoring import as_trained, sequence_ids
    from preflab.training.objectives import head_count, head_scores, load_reward_heads
    from tests.tiny_models import tiny_reward_model

    path = tiny_reward_model(
        tmp_path / "heads", num_labels=3, id2label={0: "a", 1: "b", 2: "c"}, label2id={"a": 0, "b": 1, "c": 2}
    )
    assert head_count(path) == 3
    model, tokenizer, criteria = load_reward_heads(path)
    assert criteria == ["a", "b", "c"]
    prompts = ["hello there", "hello there", "what is it", "hello there"]
    replies = ["a reply", "another, longer reply", "a reply", "a reply"]  # the last repeats the first
    vectors = head_scores(model, tokenizer, prompts, replies, batch_size=2)
    assert len(vectors) == 4 and all(len(v) == 3 for v in vectors) and vectors[3] == vectors[0]
    for (prompt, reply), vector in zip(zip(prompts, replies), vectors):
        ids = torch.tensor([sequence_ids(tokenizer, *as_trained(tokenizer, prompt, reply))])
        with torch.no_grad():
            assert vector == pytest.approx(model(input_ids=ids).logits[0].tolist(), abs=1e-5)
