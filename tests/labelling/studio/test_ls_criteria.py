"""A ranking per criterion in Label Studio: the template, its results read back, webhooks and predictions.

No server here: the template's XML, its results in the shapes Label Studio writes, and webhook
deliveries applied on both databases. `test_ls_criteria_server.py` drives the real Label Studio.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preflab.errors import InputError, Invalid
from preflab.labelling.criteria import read_criteria_file
from preflab.labelling.studio.criteria import criteria_descriptions
from preflab.labelling.studio.predict import fill_rankers, prediction_errors, prediction_result, ranker_criteria
from preflab.labelling.studio.projects import ensure_project
from preflab.labelling.studio.results import parse_annotation, parse_rankings
from preflab.templates import TEMPLATES, label_config, ranker_buckets
from preflab.templates.criteria import DESCRIPTIONS
from tests.labelling.ls_helpers import rankings
from tests.labelling.studio.webhook_bodies import (
    BASE,
    PROJECT,
    T2,
    annotation,
    apply,
    created,
    deleted,
    deliver,
    task,
    updated,
)
from tests.properties import examples

IDS = ("c1", "c2", "c3")
BOTH = ["helpfulness", "harmlessness"]
TIERS = ["tier_1", "tier_2", "tier_3", "tier_4"]


def result(name: str, value) -> dict:
    return {"from_name": name, "to_name": "responses", "type": "ranker", "value": {"ranker": value}}


def test_without_criteria_every_template_is_as_it_was():
    for template in TEMPLATES:
        assert label_config(template, ()) == label_config(template) == label_config(template, ["overall"])
    assert ranker_buckets(label_config("ranking")) == {"rank": []}


def test_a_ranker_per_criterion_with_its_description_beside_it(tmp_path):
    plain = label_config("ranking", BOTH)
    assert ranker_buckets(plain) == {"rank_helpfulness": [], "rank_harmlessness": []}
    for name in BOTH:  # each description in its criterion's block, just above its ranker
        block = plain[plain.index(f"preflab-criterion-{name}") : plain.index(f'<Ranker name="rank_{name}"')]
        assert DESCRIPTIONS[name] in block
    assert plain.count('<List name="responses"') == 1  # one list of responses, ranked twice
    tiers = label_config("ranking_tiers", BOTH)
    # Label Studio wants every name in a config unique: each criterion's buckets are its own.
    assert ranker_buckets(tiers) == {f"rank_{n}": [f"{n}_{t}" for t in TIERS] for n in BOTH}

    own = tmp_path / "criteria.toml"
    own.write_text('[helpfulness]\ndescription = "Which one would you <send> & keep?"\n', encoding="utf-8")
    config = label_config("ranking", ["helpfulness", "overall"], read_criteria_file(own))
    assert ranker_buckets(config) == {"rank_helpfulness": [], "rank": []}
    assert "Which one would you &lt;send&gt; &amp; keep?" in config and DESCRIPTIONS["overall"] in config

    with pytest.raises(InputError, match="no description for tone"):
        label_config("ranking", ["tone"])
    with pytest.raises(InputError, match="pairwise"):
        label_config("pairwise", BOTH)
    with pytest.raises(InputError, match="short name"):
        criteria_descriptions(["Helpful ness"])


def test_each_ranker_is_a_ranking_of_its_criterion_and_a_partial_answer_keeps_what_was_given():
    buckets = ranker_buckets(label_config("ranking_tiers", BOTH))
    both = {
        "result": [
            result("rank_helpfulness", {"helpfulness_tier_1": ["c2"], "helpfulness_tier_2": ["c1", "c3"], "_": []}),
            result("rank_harmlessness", {"harmlessness_tier_1": ["c3"], "harmlessness_tier_3": ["c1"], "_": ["c2"]}),
        ]
    }
    got = {p.criterion: (p.tiers, p.tier_positions()) for p in parse_rankings(both, IDS, buckets)}
    assert got == {
        "helpfulness": ((("c2",), ("c1", "c3")), (0, 1)),
        "harmlessness": ((("c3",), ("c1",)), (0, 2)),
    }
    # Harmlessness left untouched: Label Studio still writes its ranker, every response unranked.
    partial = {"result": [both["result"][0], result("rank_harmlessness", {"_": list(IDS), "harmlessness_tier_1": []})]}
    assert [p.criterion for p in parse_rankings(partial, IDS, buckets)] == ["helpfulness"]
    assert [p.criterion for p in parse_rankings({"result": both["result"][1:]}, IDS, buckets)] == ["harmlessness"]
    skipped = parse_rankings({"was_cancelled": True, "result": []}, IDS, buckets)
    assert [(p.criterion, p.skipped) for p in skipped] == [("helpfulness", True), ("harmlessness", True)]

    plain = {"result": [result("rank", {"rank": ["c3", "c1", "c2"]})]}  # the template without criteria
    assert parse_annotation(plain, IDS).criterion == "overall"
    assert parse_annotation({"result": [result("my_ranker", {"my_ranker": ["c1", "c2", "c3"]})]}, IDS).tiers
    for bad, reason in (
        ({"result": [partial["result"][1]]}, "empty ranking"),
        ({"result": [result("rank_harmlessness", {"_": list(IDS)})] * 2}, "several results of ranker"),
        ({"result": [result("a", {"a": ["c1"]}), result("b", {"b": ["c2"]})]}, "names no criterion"),
        ({"result": [result("rank_Bad", {"rank_Bad": ["c1"]}), result("rank", {"rank": ["c2"]})]}, "short name"),
    ):
        with pytest.raises(Invalid, match=reason):
            parse_rankings(bad, IDS, buckets)


def test_predictions_fill_every_criterions_ranker_and_fit_the_config():
    for template in ("ranking", "ranking_tiers"):
        config = label_config(template, BOTH)
        buckets = ranker_buckets(config)
        result = prediction_result(template, [[3], [1, 2]], [1, 2, 3], rankers=buckets)
        assert [r["from_name"] for r in result] == ["rank_helpfulness", "rank_harmlessness"]
        assert prediction_errors(config)({"result": result, "model_version": "judge"}) == []  # the SDK's check
        read = parse_rankings({"result": result}, ["c1", "c2", "c3"], buckets)
        expected = ((("c3",), ("c1", "c2")),) if template == "ranking_tiers" else ((("c3",), ("c1",), ("c2",)),)
        assert {p.criterion: p.tiers for p in read} == dict.fromkeys(BOTH, expected[0])


def test_each_ranker_shows_its_criterions_ranking_else_the_overall_one_never_another_criterions():
    helpful, harmless, overall = ([[1], [2]], {}), ([[2], [1]], {}), ([[1, 2]], {})
    criteria = ranker_criteria(["rank_helpfulness", "rank_harmlessness", "rank"])
    assert criteria == {"rank_helpfulness": "helpfulness", "rank_harmlessness": "harmlessness", "rank": "overall"}
    judged = {"helpfulness": helpful, "harmlessness": harmless}
    assert fill_rankers(criteria, judged) == {"rank_helpfulness": helpful, "rank_harmlessness": harmless}
    assert fill_rankers(criteria, {"overall": overall}) == dict.fromkeys(criteria, overall)
    assert fill_rankers(criteria, {"honesty": helpful}) == {}
    assert fill_rankers(ranker_criteria(["my_ranker"]), judged) == {}  # a project's only ranker is overall
    with pytest.raises(InputError, match="names no criterion"):
        ranker_criteria(["rank_helpfulness", "my_ranker"])


NAMES = ["overall", "helpfulness", "harmlessness", "honesty"]


@settings(max_examples=examples(200))
@given(
    on_template=st.lists(st.sampled_from(NAMES), min_size=1, unique=True),
    judged=st.lists(st.sampled_from(NAMES), unique=True),
)
def test_law_a_ranker_shows_its_criterions_ranking_or_the_overall_one_and_nothing_else(on_template, judged):
    """Whatever criteria a template ranks by and a judge ranked by: a ranker is filled when the judge ranked by its
    criterion or overall, with that criterion's ranking where there is one, and never with another criterion's."""
    rankers = ["rank" if c == "overall" else f"rank_{c}" for c in on_template]
    by_criterion = {c: ([[n], [n + 1]], {}) for n, c in enumerate(judged)}  # each ranking its own
    criteria = ranker_criteria(rankers)
    filled = fill_rankers(criteria, by_criterion)
    for name, criterion in criteria.items():
        wanted = criterion if criterion in by_criterion else "overall"
        assert filled.get(name) == by_criterion.get(wanted)


def two_rankers(aid: int, help_order, harm_order=None, *, when: str | None = None) -> dict:
    out = annotation(aid, 101, **({"when": when} if when else {}))
    out["result"] = [result("rank_helpfulness", {"rank_helpfulness": list(help_order)})]
    if harm_order is not None:
        out["result"].append(result("rank_harmlessness", {"rank_harmlessness": list(harm_order)}))
    return out


def test_webhook_stores_each_criterion_and_versions_them_apart(sessions, db_url):
    with sessions.begin() as session:
        config = label_config("ranking", BOTH)
        ensure_project(session, BASE, PROJECT, title="criteria", template="ranking", label_config=config)
    t = task(101)
    deliver(
        sessions,
        created(two_rankers(1, ("c2", "c1", "c3"), ("c3", "c1", "c2")), t),
        created(two_rankers(2, ("c1", "c2", "c3")), t),  # a partial answer: helpfulness only
    )
    summary = apply(sessions)
    assert (summary.new, summary.quarantined) == (2, 0)
    stored = {(r["annotation"], r["criterion"]): (r["version"], r["status"], r["tiers"]) for r in rankings(db_url)}
    helpful, harmless = [[2], [1], [3]], [[3], [1], [2]]
    assert stored == {
        (1, "helpfulness"): (1, "valid", helpful),
        (1, "harmlessness"): (1, "valid", harmless),
        (2, "helpfulness"): (1, "valid", [[1], [2], [3]]),
    }

    # Annotation 1 changes its harmlessness order only: that criterion gets version 2, helpfulness is kept.
    deliver(sessions, updated(two_rankers(1, ("c2", "c1", "c3"), ("c1", "c3", "c2"), when=T2), t))
    assert apply(sessions).updated == 1
    stored = {(r["annotation"], r["criterion"], r["version"]): (r["status"], r["tiers"]) for r in rankings(db_url)}
    assert stored[(1, "harmlessness", 1)] == ("superseded", harmless)
    assert stored[(1, "harmlessness", 2)] == ("valid", [[1], [3], [2]])
    assert stored[(1, "helpfulness", 1)] == ("valid", helpful) and (1, "helpfulness", 2) not in stored
    # The same delivery again adds nothing.
    deliver(sessions, updated(two_rankers(1, ("c2", "c1", "c3"), ("c1", "c3", "c2"), when=T2), t))
    apply(sessions)
    assert len(rankings(db_url)) == 4

    # Annotation 1 deleted: one annotation, its live ranking of each criterion marked deleted; again, nothing.
    deliver(sessions, deleted(1))
    assert apply(sessions).deleted == 1
    live = {(r["annotation"], r["criterion"]) for r in rankings(db_url) if r["status"] == "valid"}
    assert live == {(2, "helpfulness")}
    deliver(sessions, deleted(1))
    assert apply(sessions).deleted == 0
