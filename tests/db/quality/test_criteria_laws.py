"""Every reader works within one criterion: three laws over generated stores, on SQLite and on Postgres.

The results of a criterion are its agreement (`stats`), its annotator quality (`annotators`), its
leaderboard, its rows of the judges' trust table (`stats --judges`) and active selection's disagreement
scores (`ls push --select disagreement --criterion`), as tests/db/quality/criteria_world.py reads them.

- Extension: rankings of another criterion, on new prompts or on the same ones by the same annotators,
  change no result of a criterion.
- Relabelling: a criterion renamed gives the same results under its new name; the others do not move.
- No pair crosses criteria: a criterion whose every ranking is another's turned round (each annotator
  says A > B by helpfulness and B > A by harmlessness) agrees exactly as much, flags the same people and
  rates the models in mirror image; mixed with the other, it would read as contradictions.

Each example adds to the same store, so the laws hold on the growing union, as a store grows.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preflab.db.quality.agreement import criteria
from tests.db.quality.criteria_world import OVERALL, Store, relabel, renamed, results, reversed_by, world
from tests.properties import examples

CRITERIA = (OVERALL, "helpfulness", "harmlessness")


def test_rankings_of_another_criterion_change_no_result_of_a_criterion(sessions, tmp_path):
    store = Store(sessions, tmp_path)

    @settings(max_examples=examples(3))
    @given(st.randoms(use_true_random=False))
    def grow(rng):
        store.add(world(rng, store, CRITERIA))
        other = rng.choice(CRITERIA)
        kept = [c for c in CRITERIA if c != other]
        before = {c: results(sessions, c) for c in kept}
        # The other criterion's rankings: on the prompts there are, by the same annotators, and on new prompts.
        again = rng.sample(store.rankings, min(len(store.rankings), 8))
        store.add(reversed_by(again, other) + world(rng, store, (other,)))
        for c in kept:
            assert results(sessions, c) == before[c], c

    grow()
    # Not trivial: every criterion was there, and each kind of result had something in it.
    assert {r.criterion for r in store.rankings} == set(CRITERIA)
    every = [results(sessions, c) for c in CRITERIA]
    assert all(r["agreement"]["all"]["shared_pairs"] and r["annotators"] for r in every)
    assert any(row["shared_pairs"] for r in every for row in r["trust"])
    assert any(isinstance(r["leaderboard"], dict) for r in every)
    assert any(isinstance(r["disagreement"], dict) for r in every)


def test_a_criterion_renamed_gives_the_same_results_under_its_new_name(sessions, tmp_path):
    store = Store(sessions, tmp_path)
    renames = iter(range(100))

    @settings(max_examples=examples(3))
    @given(st.randoms(use_true_random=False))
    def grow(rng):
        store.add(world(rng, store, CRITERIA))
        present = sorted({r.criterion for r in store.rankings})
        before = {c: results(sessions, c) for c in present}
        # drawn from a range of fixed size: hypothesis replays an example only if its draws are the same
        old, new = present[rng.randrange(len(CRITERIA)) % len(present)], f"renamed{next(renames)}"
        relabel(sessions, old, new)
        for r in store.rankings:
            r.criterion = new if r.criterion == old else r.criterion
        assert results(sessions, new) == renamed(before[old], old, new)
        for c in present:
            if c != old:
                assert results(sessions, c) == before[c], c
        with sessions() as session:
            assert old not in criteria(session) and new in criteria(session)  # nothing is left under the old

    grow()


def _mirror(a: dict, b: dict) -> None:
    """Two boards of the same battles with every verdict turned round: ratings mirrored about 1000."""
    if isinstance(a, str):  # fewer than two models met: the same in both
        assert a.replace("helpfulness", "harmlessness") == b
        return
    assert (a["battles"], a["rankings"]) == (b["battles"], b["rankings"])
    ratings = {r["model"]: r for r in b["ratings"]}
    for r in a["ratings"]:
        s = ratings[r["model"]]
        assert (r["battles"], r["wins"], r["ties"], r["losses"]) == (s["battles"], s["losses"], s["ties"], s["wins"])
        assert r["rating"] - 1000 == pytest.approx(1000 - s["rating"], abs=1e-6)


TRUST = ("annotator_id", "rankings", "shared_prompts", "shared_pairs", "agreement", "kendall_tau")


def test_a_criterion_that_turns_another_round_agrees_as_much_and_contradicts_nothing(sessions, tmp_path):
    store = Store(sessions, tmp_path)

    @settings(max_examples=examples(3))
    @given(st.randoms(use_true_random=False))
    def grow(rng):
        helpful = world(rng, store, ("helpfulness",))
        store.add(helpful + reversed_by(helpful, "harmlessness"))
        help_, harm = results(sessions, "helpfulness"), results(sessions, "harmlessness")
        # Both orders turned round: every pair of annotators orders each pair of replies alike as often.
        assert harm["agreement"] == help_["agreement"]
        for a, b in zip(help_["annotators"], harm["annotators"], strict=True):
            assert (a["annotator"], a["rankings"], a["consensus_rankings"], a["flags"]) == (
                b["annotator"],
                b["rankings"],
                b["consensus_rankings"],
                b["flags"],
            )
            assert (a["consensus_tau"], a["consensus_pairwise"]) == pytest.approx(
                (b["consensus_tau"], b["consensus_pairwise"])
            )
        assert [tuple(r[k] for k in TRUST) for r in help_["trust"]] == [
            tuple(r[k] for k in TRUST) for r in harm["trust"]
        ]
        _mirror(help_["leaderboard"], harm["leaderboard"])
        if isinstance(help_["disagreement"], str):
            assert harm["disagreement"] == help_["disagreement"].replace("helpfulness", "harmlessness")
        else:
            scores = {p: score for p, (score, _) in help_["disagreement"].items()}
            assert {p: score for p, (score, _) in harm["disagreement"].items()} == pytest.approx(scores)

    grow()
    # Not trivial: people and judges shared prompts, and some agreed less than fully (a mixture would show more).
    help_ = results(sessions, "helpfulness")
    assert help_["agreement"]["human-ai"]["shared_pairs"] and help_["agreement"]["all"]["pairwise_agreement"] < 1
    assert any(r["shared_pairs"] for r in help_["trust"]) and not isinstance(help_["leaderboard"], str)
