"""oasst2: OpenAssistant message trees become one ranking per parent with two or more ranked replies."""

import json
import os

import pytest

from preflab.db.ingest.datasets import job
from preflab.db.ingest.datasets.formats import Refusals, split_groups, units
from preflab.db.ingest.datasets.oasst import FORMAT
from preflab.db.ingest.datasets.rows import value_row
from preflab.errors import Invalid
from tests.db.ingest.datasets.shapes_b import (
    ordered,
    pairs,
    parsed,
    quarantined,
    run_import,
    sqlite_only,
    stored,
    write_jsonl,
    write_parquet,
)


def message(mid, parent, tree, role, text, rank=None, deleted=False, review=True, model=None, lang="en"):
    """A message row as the flat oasst2 files hold it."""
    return {
        "message_id": mid,
        "parent_id": parent,
        "user_id": f"user-{mid}",
        "created_date": "2023-02-05T14:23:50.983374+00:00",
        "text": text,
        "role": role,
        "lang": lang,
        "review_count": 3,
        "review_result": review,
        "deleted": deleted,
        "rank": rank,
        "synthetic": model is not None,
        "model_name": model,
        "detoxify": None,
        "message_tree_id": tree,
        "tree_state": "ready_for_export",
        "emojis": {"name": ["+1"], "count": [2]},
        "labels": {"name": ["spam"], "value": [0.0], "count": [3]},
    }


def tree_1():
    t = "t1"
    return [
        message(t, None, t, "prompter", "Why is the sky blue?"),
        message("a1", t, t, "assistant", "Rayleigh scattering.", rank=0),
        message("a2", t, t, "assistant", "Because of the ocean.", rank=1),
        message("a3", t, t, "assistant", "Deleted reply.", rank=2, deleted=True),
        message("a4", t, t, "assistant", "Never ranked."),
        message("p1", "a1", t, "prompter", "Explain more"),
        message("b1", "p1", t, "assistant", "Short waves scatter most.", rank=0, model="oasst-sft-7"),
        message("b2", "p1", t, "assistant", "Blue light bends.", rank=1),
        message("b3", "p1", t, "assistant", "Air molecules.", rank=1),
        message("p2", "a2", t, "prompter", "Really?"),
        message("c1", "p2", t, "assistant", "No, sorry.", rank=0),
        message("c2", "p2", t, "assistant", "Spam reply.", rank=1, review=False),
    ]


def tree_2():
    t = "t2"
    return [
        message(t, None, t, "prompter", "Quelle est la capitale de la France ?", lang="fr"),
        message("d1", t, t, "assistant", "Paris.", rank=0, lang="fr"),
        message("d2", t, t, "assistant", "Lyon.", rank=1, lang="fr"),
        message("q1", "d1", t, "prompter", "spam spam", deleted=True, lang="fr"),
        message("e1", "q1", t, "assistant", "Reply to spam.", rank=0, lang="fr"),
        message("e2", "q1", t, "assistant", "Another reply to spam.", rank=1, lang="fr"),
    ]


def tree_3():  # two ranked replies with the same text: the tree is quarantined, naming the parent
    t = "t3"
    return [
        message(t, None, t, "prompter", "Say yes"),
        message("y1", t, t, "assistant", "Yes.", rank=0),
        message("y2", t, t, "assistant", "Yes.", rank=1),
    ]


def tree_4():
    t = "t4"
    return [
        message(t, None, t, "prompter", "Count to two"),
        message("f1", t, t, "assistant", "1, 2", rank=0),
        message("f3", t, t, "assistant", "one", rank=2),
        message("f2", t, t, "assistant", "1 2", rank=1),
    ]


# tree t4's reply ranked 1 comes after tree t3: the rows of t4 are not together. Ranked from its first
# run, t4 would give "1, 2" > "one", leaving out "1 2", and the sorted file could not complete it later.
ROWS = tree_1() + tree_4()[:3] + tree_2() + tree_3() + tree_4()[3:]
RANKED = [
    {
        "prompt": "Why is the sky blue?",
        "tiers": [["Rayleigh scattering."], ["Because of the ocean."]],
        "details": {"message_ids": ["a1", "a2"], "lang": "en"},
        "external_id": "t1",
    },
    {
        "prompt": ("user: Why is the sky blue?", "assistant: Rayleigh scattering.", "user: Explain more"),
        "tiers": [["Short waves scatter most."], ["Blue light bends.", "Air molecules."]],
        "details": {"message_ids": ["b1", "b2", "b3"], "lang": "en"},
        "external_id": "p1",
    },
    {
        "prompt": "Quelle est la capitale de la France ?",
        "tiers": [["Paris."], ["Lyon."]],
        "details": {"message_ids": ["d1", "d2"], "lang": "fr"},
        "external_id": "t2",
    },
]
NO_ROOT = (
    "the rows of message tree t4 are not together; sort the file by message_tree_id (no root message among its 1 row)"
)
APART = "the rows of message tree t4 are not together; sort the file by message_tree_id (they come in 2 runs)"
SAME = "the replies to message t3: message y1 and message y2 are identical"
REASONS = {
    "train:21": SAME,
    "train:22": SAME,
    "train:23": SAME,
    "train:12": APART,
    "train:13": APART,
    "train:14": APART,
    "train:24": APART,
}
T4 = {
    "prompt": "Count to two",
    "tiers": [["1, 2"], ["1 2"], ["one"]],
    "details": {"message_ids": ["f1", "f3", "f2"], "lang": "en"},
    "external_id": "t4",
}


def test_parse_tree_by_tree():
    assert [
        {k: r[k] for k in ("prompt", "tiers", "details", "external_id")} for r in parsed(FORMAT.parse(tree_1()))
    ] == RANKED[:2]
    (first, second) = parsed(FORMAT.parse(tree_1()))
    assert first["models"] == [None, None] and second["models"] == ["oasst-sft-7", None, None]
    assert (first["annotator"], first["kind"], first["scores"]) == ("OpenAssistant", "human", None)
    assert [
        {k: r[k] for k in ("prompt", "tiers", "details", "external_id")} for r in parsed(FORMAT.parse(tree_2()))
    ] == RANKED[2:]  # none below the deleted message
    assert FORMAT.parse(tree_4()[:2]) == []  # one ranked reply: nothing to rank
    with pytest.raises(Invalid, match=f"^{SAME}$"):
        FORMAT.parse(tree_3())
    with pytest.raises(Invalid, match=rf"^{NO_ROOT.replace('(', '[(]').replace(')', '[)]')}$"):
        FORMAT.parse(tree_4()[3:])
    orphan = [tree_4()[0], message("g1", "elsewhere", "t4", "assistant", "Lost.", rank=0)]
    with pytest.raises(Invalid, match=r"\(the parent of message g1 is not among its 2 rows\)$"):
        FORMAT.parse(orphan)
    with pytest.raises(Invalid, match=r"^message tree t4 has 2 root messages"):
        FORMAT.parse([tree_4()[0], {**tree_4()[0], "message_id": "t4b"}])


def test_rows_are_parsed_a_tree_at_a_time():
    rows = [value_row("train", i, row) for i, row in enumerate(ROWS)]
    assert [len(unit) for unit in units(FORMAT, rows)] == [12, 3, 6, 3, 1]
    # a tree met again is refused even when the first read did not say so
    refusals = Refusals(FORMAT, {})
    assert [refusals.reason(unit) for unit in units(FORMAT, rows)] == [None] * 4 + [
        "the rows of message tree t4 are not together; sort the file by message_tree_id (met again after other rows)"
    ]
    assert split_groups(FORMAT, [row["message_tree_id"] for row in ROWS]) == {"t4": APART}
    # a tree --limit cuts is refused, whole: a ranking of its first replies would leave out the rest
    assert split_groups(FORMAT, ["t1", "t1", "t2", "t2"], limit=3) == {
        "t2": "the rows of message tree t2 go on past --limit 3: give a higher --limit to import it"
    }
    assert split_groups(FORMAT, ["t1", "t1", "t2", "t3"], limit=3) == {}


def without_nulls(rows):
    """The JSON Lines dumps leave out null fields (a root has no parent_id; an unranked message no rank)."""
    return [{k: v for k, v in row.items() if v is not None} for row in rows]


@pytest.mark.parametrize(
    "writer, aside",
    [(write_jsonl, False), (write_parquet, False), (write_jsonl, True)],
    ids=["jsonl", "parquet", "jsonl-tree-ids-read-aside"],
)
def test_import_rankings_ties_pairs_quarantine_and_reimport(sessions, tmp_path, writer, aside, monkeypatch):
    jsonl = writer is write_jsonl
    reader = tmp_path / "first-read-pid"
    if aside:  # as for a big file: the tree ids are read by a child process while the first trees are parsed
        monkeypatch.setattr(job, "ASIDE_BYTES", 0)
        first_read = job._split_groups
        monkeypatch.setattr(job, "_split_groups", lambda *a: reader.write_text(str(os.getpid())) and first_read(*a))
    path = writer(tmp_path / ("oasst2.jsonl" if jsonl else "oasst2.parquet"), without_nulls(ROWS) if jsonl else ROWS)
    summary = run_import(sessions, path, "oasst2")
    assert (summary.rows, summary.rankings, summary.ties, summary.quarantined) == (25, 3, 0, 7)
    assert summary.reasons == {SAME: 3, APART: 4}
    assert summary.notes == [
        f"1 message tree of {path} is not together, so their rows are quarantined and none of "
        "their rankings stored: sort the file by message_tree_id and import it again"
    ]
    got = stored(sessions)
    assert [{k: r[k] for k in ("prompt", "tiers", "details", "external_id")} for r in got] == RANKED
    assert got[1]["models"]["Short waves scatter most."] == "oasst-sft-7"
    assert {r["annotator"] for r in got} == {("human", "OpenAssistant")}
    assert quarantined(sessions) == REASONS
    assert pairs(sessions) == ordered(
        [
            ("Rayleigh scattering.", "Because of the ocean.", 1.0),
            ("Short waves scatter most.", "Blue light bends.", 1.0),
            ("Short waves scatter most.", "Air molecules.", 1.0),
            ("Paris.", "Lyon.", 1.0),
        ]
    )

    assert not aside or int(reader.read_text()) != os.getpid()
    again = run_import(sessions, path, "oasst2")
    assert (again.rankings, again.duplicates) == (0, 3)
    assert len(stored(sessions)) == 3

    # the file sorted by tree: t4 gets its whole ranking, and its rows, found now, are no longer quarantined
    rows = tree_1() + tree_2() + tree_3() + tree_4()
    path = writer(tmp_path / ("sorted.jsonl" if jsonl else "sorted.parquet"), without_nulls(rows) if jsonl else rows)
    fixed = run_import(sessions, path, "oasst2")
    assert (fixed.rankings, fixed.duplicates, fixed.quarantined) == (1, 3, 3)
    assert [{k: r[k] for k in ("prompt", "tiers", "details", "external_id")} for r in stored(sessions)] == [*RANKED, T4]
    assert quarantined(sessions) == {k: v for k, v in REASONS.items() if v == SAME}


def test_limit_never_cuts_a_tree(sessions, tmp_path):
    rows = tree_1() + tree_4()
    path = write_jsonl(tmp_path / "oasst2.jsonl", without_nulls(rows))
    cut = run_import(sessions, path, "oasst2", limit=14)  # t4's last reply is past the limit
    assert (cut.rows, cut.rankings, cut.quarantined) == (14, 2, 2)
    assert set(cut.reasons) == {"the rows of message tree t4 go on past --limit 14: give a higher --limit to import it"}
    whole = run_import(sessions, path, "oasst2")
    assert (whole.rankings, whole.duplicates, whole.quarantined) == (1, 2, 0)
    assert stored(sessions)[-1]["tiers"] == T4["tiers"] and quarantined(sessions) == {}


@sqlite_only
def test_auto_picks_oasst2_from_the_columns(sessions, tmp_path):
    summary = run_import(sessions, write_jsonl(tmp_path / "oasst2.jsonl", without_nulls(tree_1() + tree_2())), "auto")
    assert (summary.format, summary.rankings) == ("oasst2", 3)


def test_the_example_tree_gives_its_ranking():
    (got,) = parsed(FORMAT.parse([json.loads(line) for line in FORMAT.example.splitlines()]))
    assert (got["prompt"], got["tiers"]) == ("Capital of France?", [["Paris."], ["Lyon."]])
