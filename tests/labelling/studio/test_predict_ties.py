"""A judge's tie is predicted as a tie (issue 46, 1g): `ls predict` against the real Label Studio, and the law
every template's prediction obeys, whatever the tiers and the order shown.

A prediction shows what the judge decided. A tie is one bucket in the tiers template and the Tie choice in the
pairwise one; the plain ranker can only show an order, so tied replies keep the order the task shows them in
(never one the judge did not choose), with a tie's score and a note saying which responses are tied.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preflab.labelling.studio.predict import confidence, prediction_result, tie_note
from preflab.templates import bucket_names, label_config
from tests.labelling.ls_helpers import tasks, unique
from tests.properties import examples


@st.composite
def tiers_and_shown(draw):
    """A task's shown order of 2-6 candidates and a judge's tiers of some of them (best first)."""
    shown = draw(st.permutations(list(range(1, draw(st.integers(2, 6)) + 1))))
    ranked = draw(st.lists(st.sampled_from(shown), unique=True, min_size=2, max_size=len(shown)))
    cuts = sorted(draw(st.sets(st.integers(1, len(ranked) - 1), max_size=len(ranked) - 1)))
    tiers = [ranked[a:b] for a, b in zip([0, *cuts], [*cuts, len(ranked)])]
    return tiers, list(shown)


@settings(max_examples=examples(200))
@given(case=tiers_and_shown())
def test_law_a_prediction_says_the_judges_tiers_and_no_order_inside_a_tie(case):
    tiers, shown = case
    position = {c: n for n, c in enumerate(shown)}
    in_shown_order = [sorted(t, key=position.get) for t in tiers]
    ranked = {c for t in tiers for c in t}
    (ranker,) = prediction_result("ranking", tiers, shown)
    order = [int(c[1:]) for c in ranker["value"]["ranker"]["rank"]]
    # The tiers in turn, each in the order shown, then what the judge did not rank, in the order shown.
    assert order == [c for t in in_shown_order for c in t] + [c for c in shown if c not in ranked]
    has_tie = any(len(t) > 1 for t in tiers)
    assert ("meta" in ranker) == has_tie == (tie_note(tiers, shown) is not None)
    if has_tie:
        note = ranker["meta"]["text"][0]
        if len(tiers) == 1 and len(ranked) == len(shown):  # a tie of everything: said so
            assert f"found {'both' if len(shown) == 2 else f'all {len(shown)}'} responses equally good" in note
        else:  # each tied response named by the number it is shown with
            for tier in (t for t in tiers if len(t) > 1):
                assert all(str(position[c] + 1) in note for c in tier)
    scores = {c: -float(k) for k, t in enumerate(tiers) for c in t}  # a tie: one score
    if len(tiers) == 1:
        assert confidence(tiers, scores, shown) == 0.5
    buckets = bucket_names(label_config("ranking_tiers"))
    tiered = prediction_result("ranking_tiers", tiers, shown, buckets)
    if len(tiers) <= len(buckets):
        value = tiered[0]["value"]["ranker"]
        assert [[int(c[1:]) for c in value[b]] for b in buckets[: len(tiers)]] == in_shown_order  # a tie: one bucket
    else:
        assert tiered is None
    if len(shown) == 2 and len(ranked) == 2:
        (pair,) = prediction_result("pairwise", tiers, shown)
        assert (pair["value"] == {"choices": ["Tie"]}) == (len(tiers) == 1)


def test_ls_predict_sends_a_tie_in_the_plain_ranker_as_the_order_shown_with_its_score_and_note(
    lcli, sqlite_url, ls_env, tmp_path
):
    responses = [unique(f"reply {r}") for r in range(4)]
    path = tmp_path / "judged.jsonl"
    path.write_text(
        json.dumps(
            {
                "prompt": unique("Which is best?"),
                "responses": responses,
                "ranking": [[0, 1, 2, 3]],
                "annotator": "judge-tie",
                "annotator_kind": "ai",
            }
        )
        + "\n",
        encoding="utf-8",
    )
    lcli("import", "rankings", path)
    pid = json.loads(lcli("ls", "init", "--template", "ranking", "--title", unique("ties"), "--json").stdout)[
        "project_id"
    ]
    lcli("ls", "push", "--project", pid)
    (task,) = tasks(sqlite_url)
    out = json.loads(lcli("ls", "predict", "--project", pid, "--json").stdout)
    assert out["uploaded"] == 1
    (stored,) = ls_env.sdk().predictions.list(task=task["id"])
    assert stored.result[0]["value"]["ranker"]["rank"] == [f"c{c}" for c in task["shown"]]
    assert stored.score == pytest.approx(0.5)
    assert stored.result[0]["meta"]["text"] == [
        "A tie: the judge found all 4 responses equally good. They are in the order shown, not ranked: "
        "the order is yours to choose."
    ]
