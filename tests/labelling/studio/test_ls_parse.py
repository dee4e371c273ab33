"""Parsing Label Studio tasks and annotations: every result shape, and what is quarantined."""

import json

import pytest

from preflab.db.conversation import assistant_turn, user_turn
from preflab.errors import Invalid
from preflab.labelling.studio.parse import (
    TaskFields,
    payload,
    task_items,
)
from preflab.labelling.studio.predict import prediction_result
from preflab.labelling.studio.results import parse_annotation, same_as_shown
from preflab.templates import TEMPLATES, bucket_names, label_config

IDS = ("c1", "c2", "c3", "c4")
BUCKETS = ["tier_1", "tier_2", "tier_3", "tier_4"]


def ann(*results, **extra):
    return {"id": 7, "completed_by": 3, "result": list(results), "was_cancelled": False, **extra}


def ranker(value, name="rank"):
    return {"from_name": name, "to_name": "responses", "type": "ranker", "value": {"ranker": value}}


def tiers(parsed):
    return [list(t) for t in parsed.tiers]


def test_ranker_current_shape():
    parsed = parse_annotation(ann(ranker({"rank": ["c3", "c1", "c4", "c2"]})), IDS)
    assert tiers(parsed) == [["c3"], ["c1"], ["c4"], ["c2"]]
    assert parsed.shape == "ranker" and not parsed.skipped


def test_ranker_pre_2023_list_shape():
    parsed = parse_annotation(ann(ranker(["c2", "c1", "c3", "c4"])), IDS)
    assert tiers(parsed) == [["c2"], ["c1"], ["c3"], ["c4"]]
    assert parsed.shape == "ranker-legacy"


def test_buckets_are_tiers_in_template_order_and_underscore_is_unranked():
    # Label Studio writes the buckets in any order; the template's order decides the tiers.
    value = {"_": ["c2"], "tier_2": ["c3", "c4"], "tier_1": ["c1"], "tier_3": [], "tier_4": []}
    parsed = parse_annotation(ann(ranker(value)), IDS, BUCKETS)
    assert tiers(parsed) == [["c1"], ["c3", "c4"]]
    assert parsed.ranked == {"c1", "c3", "c4"}
    assert parsed.shape == "buckets"


def test_buckets_without_a_known_template_are_never_guessed():
    # Label Studio writes bucket keys in no meaningful order: taken as written, "bad" could come first.
    value = {"good": ["c1", "c2"], "bad": ["c3"], "_": ["c4"]}
    with pytest.raises(
        Invalid,
        match=r"the ranker's buckets \(good, bad\) are tiers whose order only the "
        r"labelling config knows: pass --buckets",
    ):
        parse_annotation(ann(ranker(value)), IDS)


def test_pairwise_left_right_and_tie():
    pair = ("c1", "c2")
    left = {"from_name": "compare", "to_name": "left,right", "type": "pairwise", "value": {"selected": "left"}}
    right = {**left, "value": {"selected": "right"}}
    tie = {"from_name": "tie", "to_name": "prompt", "type": "choices", "value": {"choices": ["Tie"]}}
    assert tiers(parse_annotation(ann(left), pair)) == [["c1"], ["c2"]]
    assert tiers(parse_annotation(ann(right), pair)) == [["c2"], ["c1"]]
    assert tiers(parse_annotation(ann(tie), pair)) == [["c1", "c2"]]
    assert tiers(parse_annotation(ann(right, tie), pair)) == [["c1", "c2"]]  # a ticked tie wins


def test_skipped_annotation_has_no_tiers():
    parsed = parse_annotation(ann(was_cancelled=True), IDS)
    assert parsed.skipped and parsed.tiers == ()


def test_integer_item_ids_match_their_string_form():
    items = task_items({"prompt": "p", "items": [{"id": 1, "body": "a"}, {"id": 2, "body": "b"}]})
    assert items.ids == ("1", "2")
    assert tiers(parse_annotation(ann(ranker({"rank": [2, 1]})), items.ids)) == [["2"], ["1"]]


@pytest.mark.parametrize(
    "annotation, reason",
    [
        (ann(), "empty result"),
        ({"id": 1, "result": None}, "no result list"),
        (ann(ranker({"rank": ["c1", "c9"]})), "unknown item id 'c9'"),
        (ann(ranker({"rank": ["c1", "c2", "c1"]})), "ranked twice"),
        (ann(ranker({"tier_1": ["c1"], "tier_2": ["c1"], "_": []})), "ranked twice"),
        (ann(ranker({"tier_1": [], "_": ["c1", "c2", "c3", "c4"]})), "empty ranking"),
        (ann(ranker({"rank": "c1,c2"})), "not a list"),
        (ann(ranker("c1 > c2")), "unrecognised ranker value"),
        (ann(ranker({"best": ["c1"], "tier_1": ["c2"]})), "unknown bucket 'best'"),
        (ann({"type": "textarea", "value": {"text": ["fine"]}}), "no ranker or pairwise result"),
        (ann(ranker({"rank": ["c1"]}), ranker({"rank": ["c2"]})), "several"),
        (ann({"type": "pairwise", "value": {"selected": "middle"}}), "a task with two items"),
    ],
)
def test_bad_annotations_are_invalid_with_the_reason(annotation, reason):
    with pytest.raises(Invalid, match=reason):
        parse_annotation(annotation, IDS, BUCKETS)


def test_pairwise_selection_must_be_a_side():
    with pytest.raises(Invalid, match="not 'left' or 'right'"):
        parse_annotation(ann({"type": "pairwise", "value": {"selected": "middle"}}), ("c1", "c2"))


@pytest.mark.parametrize(
    "data, reason",
    [
        ("text", "not an object"),
        ({"items": []}, "no 'prompt'"),
        ({"prompt": "p", "items": [{"id": "a", "body": "x"}]}, "at least two"),
        ({"prompt": "p", "items": [{"id": "a", "body": "x"}, {"body": "y"}]}, "has no 'id'"),
        ({"prompt": "p", "items": [{"id": "a", "body": "x"}, {"id": "a", "body": "y"}]}, "appears twice"),
        ({"prompt": "p", "items": [{"id": "a", "body": "x"}, {"id": "b", "body": " x "}]}, "same text"),
        ({"prompt": "p", "items": [{"id": "a", "body": "x"}, {"id": "b", "body": ""}]}, "non-empty"),
    ],
)
def test_bad_task_data_is_invalid(data, reason):
    with pytest.raises(Invalid, match=reason):
        task_items(data)


def test_other_field_names():
    data = {"question": "q?", "answers": [{"key": "m1", "text": "one"}, {"key": "m2", "text": "two"}]}
    fields = TaskFields(prompt_field="question", items_field="answers", id_field="key", text_field="text")
    items = task_items(data, fields)
    assert (items.prompt, items.ids, items.replies) == (
        user_turn("q?"),
        ("m1", "m2"),
        (assistant_turn("one"), assistant_turn("two")),
    )
    pair = task_items({"prompt": "q", "answer1": "a", "answer2": "b"}, TaskFields(pair_fields="answer1,answer2"))
    assert (pair.ids, pair.replies) == (("left", "right"), (assistant_turn("a"), assistant_turn("b")))


def test_same_as_shown_flags_an_untouched_ranking_only():
    shown = ["c2", "c4", "c1", "c3"]
    untouched = parse_annotation(ann(ranker({"rank": shown})), IDS)
    moved = parse_annotation(ann(ranker({"rank": ["c4", "c2", "c1", "c3"]})), IDS)
    assert same_as_shown(untouched, shown) and not same_as_shown(moved, shown)
    tied = parse_annotation(ann(ranker({"tier_1": ["c2", "c4"], "tier_2": ["c1", "c3"]})), IDS, BUCKETS)
    assert not same_as_shown(tied, shown)


def test_payload_drops_volatile_fields_and_is_stable():
    task = {"id": 5, "project": 2, "data": {"prompt": "p"}}
    a = ann(ranker({"rank": ["c1"]}), created_ago="2 minutes")
    b = dict(a, created_ago="9 minutes", created_username="x")
    assert payload(task, a) == payload(task, b)
    assert "created_ago" not in json.loads(payload(task, a))["annotation"]


def test_templates_load_and_name_their_buckets():
    for name in TEMPLATES:
        assert label_config(name).lstrip().startswith("<")
    assert bucket_names(label_config("ranking_tiers")) == BUCKETS
    assert bucket_names(label_config("ranking")) is None


@pytest.mark.parametrize(
    "template, ranking, shown",
    [
        ("ranking", [[3], [1], [2]], [1, 2, 3]),
        ("ranking", [[3, 1], [2]], [1, 2, 3]),  # a tie is flattened in the order shown
        ("ranking_tiers", [[3, 1], [2]], [1, 2, 3, 4]),  # 4 left unranked
        ("pairwise", [[2], [1]], [1, 2]),
        ("pairwise", [[1, 2]], [1, 2]),
    ],
)
def test_predictions_read_back_as_the_ranking(template, ranking, shown):
    result = prediction_result(template, ranking, shown, BUCKETS)
    parsed = parse_annotation({"id": 1, "result": result}, [f"c{c}" for c in shown], BUCKETS)
    back = [sorted(int(i[1:]) for i in tier) for tier in parsed.tiers]
    if template == "ranking":  # a plain ranker cannot tie: the tie comes back in the order shown
        assert [c for t in back for c in t] == [c for t in ranking for c in sorted(t, key=shown.index)] + [
            c for c in shown if c not in {x for t in ranking for x in t}
        ]
    else:
        assert back == [sorted(t) for t in ranking]


def test_prediction_that_the_template_cannot_show():
    assert prediction_result("ranking_tiers", [[1], [2], [3], [4], [5]], [1, 2, 3, 4, 5], BUCKETS) is None
    assert prediction_result("pairwise", [[1]], [1, 2]) is None


def test_shuffle_is_seeded_per_task():
    from preflab.labelling.studio.task_data import shown_order

    ids = list(range(1, 9))
    order = shown_order(ids, seed=0, project_id=3, prompt_id=7)
    assert sorted(order) == ids
    assert shown_order(list(reversed(ids)), seed=0, project_id=3, prompt_id=7) == order  # same task, same order
    others = {tuple(shown_order(ids, seed=s, project_id=3, prompt_id=7)) for s in range(1, 6)}
    assert len(others | {tuple(order)}) > 1  # another seed shuffles differently
