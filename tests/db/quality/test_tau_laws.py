"""preflab's three tau-b kernels against scipy, on generated rankings with ties and unranked items.

`compare_rankings` (stats, judges, active selection, self-rewarding), `consensus.against`
(annotators, in numpy) and `report.agreement.compare_block` (the report, in numpy)
count the same pairs three ways; each must equal `tests/db/quality/reference.py`.
"""

from __future__ import annotations

from itertools import combinations, pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preflab.db.quality import consensus
from preflab.db.quality.agreement import compare_rankings
from tests.db.quality import reference as ref
from tests.properties import examples


@st.composite
def tiers(draw, items: int = 7) -> list[list[int]]:
    """A ranking of some of `items` items, best first, with ties."""
    kept = draw(st.lists(st.integers(0, items - 1), unique=True, min_size=1, max_size=items))
    cuts = draw(st.lists(st.booleans(), min_size=len(kept), max_size=len(kept)))
    out: list[list[int]] = []
    for item, new in zip(kept, cuts):
        if new or not out:
            out.append([item])
        else:
            out[-1].append(item)
    return out


def same(got, want) -> bool:
    return (got is None and want is None) or (got is not None and want is not None and got == pytest.approx(want))


@settings(max_examples=examples(300))
@given(tiers(), tiers())
def test_compare_rankings_is_scipys_tau_b_and_a_plain_pair_count(first, second):
    strict, alike, tau = compare_rankings(first, second)
    assert (strict, alike) == ref.pair_counts(ref.scoring(first), ref.scoring(second))
    assert same(tau, ref.tau_b(ref.scoring(first), ref.scoring(second)))


def _rows(rankings: list[tuple[int, int, list[list[int]]]]) -> np.ndarray:
    """(prompt, ranking, annotator, candidate, tier) rows of (prompt, annotator, tiers) rankings."""
    return np.array(
        [(p, r, a, c, t) for r, (p, a, ranking) in enumerate(rankings) for t, tier in enumerate(ranking) for c in tier],
        dtype=np.int64,
    ).reshape(-1, 5)


@settings(max_examples=examples(150))
@given(st.lists(tiers(), min_size=1, max_size=6), st.dictionaries(st.integers(0, 6), st.integers(-3, 3)))
def test_the_annotator_kernel_is_scipys_tau_b_against_any_reference(rankings, scores):
    """`against` compares each ranking with a score per candidate (missing: unranked), as `compare_rankings` does."""
    rows = consensus.by_ranking(_rows([(0, a, r) for a, r in enumerate(rankings)]))
    reference = np.array([scores.get(int(c), np.nan) for c in rows[:, consensus.CANDIDATE]], dtype=float)
    compared = consensus.against(rows, reference)
    for i, ranking in enumerate(rankings):
        strict, alike = ref.pair_counts(ref.scoring(ranking), scores)
        assert (compared.strict[i], compared.agreeing[i]) == (strict, alike)
        tau = ref.tau_b(ref.scoring(ranking), scores)
        assert same(None if np.isnan(compared.tau[i]) else float(compared.tau[i]), tau)


@settings(max_examples=examples(150))
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), tiers()), min_size=1, max_size=10))
def test_the_reports_kernel_is_scipys_tau_b_by_annotator_pair(rankings):
    """Every two rankings of a prompt by different annotators, summed per annotator pair."""
    from preflab.report.agreement import compare_block

    tallies, _, _ = compare_block(_rows(rankings))
    want: dict[tuple[int, int], ref.Tally] = {}
    for (p, a, first), (q, b, second) in combinations(rankings, 2):
        if p == q and a != b:
            want.setdefault((min(a, b), max(a, b)), ref.Tally()).add(ref.scoring(first), ref.scoring(second))
    got = {(key >> 32, key & 0xFFFFFFFF): tally for key, tally in tallies.items()}
    assert set(got) == set(want)
    for key, tally in want.items():
        mine = got[key].as_dict()
        assert (mine["ranking_pairs"], mine["shared_pairs"]) == (tally.ranking_pairs, tally.shared_pairs), key
        assert same(mine["pairwise_agreement"], tally.agreement) and same(mine["kendall_tau"], tally.tau), key


@settings(max_examples=examples(100))
@given(st.dictionaries(st.integers(0, 5), st.lists(tiers(), max_size=4), max_size=5))
def test_active_selection_scores_disagreement_by_scipys_mean_tau_b(rankings):
    """`ls push --select disagreement`: (1 − mean tau-b over every two rankings) / 2, best first."""
    from preflab.labelling.active import pick_disagreement

    want = {}
    for pid, views in rankings.items():
        taus = [t for a, b in combinations(views, 2) if (t := ref.tau_b(ref.scoring(a), ref.scoring(b))) is not None]
        if taus:
            want[pid] = (1 - sum(taus) / len(taus)) / 2
    chosen = pick_disagreement(rankings, k=len(rankings))
    assert {c.prompt_id: c.score for c in chosen} == pytest.approx(want)
    assert all(a.score >= b.score for a, b in pairwise(chosen))


@settings(max_examples=examples(100))
@given(
    st.dictionaries(
        st.integers(0, 5),
        st.dictionaries(st.sampled_from(["overall", "helpfulness", "harmlessness"]), st.lists(tiers(), max_size=3)),
        max_size=5,
    )
)
def test_active_selection_by_criterion_scores_each_criterion_by_scipy_and_keeps_the_most_disputed(rankings):
    """Rankings of several criteria: each criterion's (1 − mean tau-b) / 2 over its own rankings only, and a
    prompt scores as its most disputed criterion."""
    from preflab.labelling.active import pick_disagreement

    want = {}
    for pid, by_criterion in rankings.items():
        for views in by_criterion.values():
            pairs = combinations(views, 2)
            taus = [t for a, b in pairs if (t := ref.tau_b(ref.scoring(a), ref.scoring(b))) is not None]
            if taus:
                want[pid] = max(want.get(pid, -1.0), (1 - sum(taus) / len(taus)) / 2)
    chosen = pick_disagreement(rankings, k=len(rankings))
    assert {c.prompt_id: c.score for c in chosen} == pytest.approx(want)
