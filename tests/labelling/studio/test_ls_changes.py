"""Annotations that change in Label Studio: edited, deleted, unreadable; and AI predictions."""

import json

from sqlalchemy import select

from preflab.db.models import RawRecord
from tests.labelling.ls_helpers import (
    comparisons,
    expected_pairs,
    item,
    ranker_result,
    rankings,
    session,
    tasks,
    unique,
    write_prompts,
)


def test_edited_deleted_and_unreadable_annotations(lcli, sqlite_url, ls_env, tmp_path):
    server = ls_env
    prompt = unique("Summarise the plot of Hamlet.")
    lcli("import", "prompts", write_prompts(tmp_path / "p.jsonl", {prompt: [unique(f"hamlet {i}") for i in range(3)]}))
    pid = json.loads(lcli("ls", "init", "--title", unique("changes"), "--json").stdout)["project_id"]
    lcli("ls", "push", "--project", pid)
    (task,) = tasks(sqlite_url)
    x, y, z = task["shown"]
    dana, eli, fay = (f"{n}-{pid}@preflab.test" for n in ("dana", "eli", "fay"))
    ids = {e: server.signup(e) for e in (dana, eli, fay)}
    sdk = server.sdk()
    first = sdk.annotations.create(
        task["id"], completed_by=ids[dana], result=ranker_result({"rank": [item(z), item(x), item(y)]})
    )
    doomed = sdk.annotations.create(
        task["id"], completed_by=ids[eli], result=ranker_result({"rank": [item(y), item(z), item(x)]})
    )
    # Submitted as shown: the annotator may not have dragged anything.
    sdk.annotations.create(
        task["id"], completed_by=ids[fay], result=ranker_result({"rank": [item(x), item(y), item(z)]})
    )
    assert json.loads(lcli("ls", "sync", "--project", pid, "--json").stdout)["new"] == 3
    assert json.loads(lcli("stats", "--json").stdout)["counts"]["same_as_shown"] == 1

    # dana changes her mind, eli's annotation is deleted, fay's is rewritten with an id the task does not have.
    sdk.annotations.update(first.id, result=ranker_result({"rank": [item(x), item(z), item(y)]}))
    sdk.annotations.delete(doomed.id)
    fay_annotation = next(r["annotation"] for r in rankings(sqlite_url) if r["annotator"] == fay)
    sdk.annotations.update(fay_annotation, result=ranker_result({"rank": [item(x), "c999999", item(z)]}))
    summary = json.loads(lcli("ls", "sync", "--project", pid, "--json").stdout)
    assert (summary["updated"], summary["deleted"], summary["quarantined"], summary["new"]) == (1, 1, 1, 0)

    by_annotator = {}
    for r in rankings(sqlite_url):
        by_annotator.setdefault(r["annotator"], []).append(r)
    old, new = sorted(by_annotator[dana], key=lambda r: r["version"])
    assert (old["status"], old["tiers"], new["status"], new["version"], new["tiers"]) == (
        "superseded",
        [[z], [x], [y]],
        "valid",
        2,
        [[x], [z], [y]],
    )
    assert [r["status"] for r in by_annotator[eli]] == ["deleted"]
    assert [r["status"] for r in by_annotator[fay]] == ["superseded"]  # its annotation no longer says it
    with session(sqlite_url) as s:
        (bad,) = s.scalars(select(RawRecord).where(RawRecord.status == "quarantined")).all()
        assert "unknown item id 'c999999'" in bad.reason and "c999999" in bad.payload
    listed = lcli("quarantine", "list", "--source", "label-studio").output
    assert "unknown item id 'c999999'" in listed

    lcli("pairs", "build")
    assert comparisons(sqlite_url) == expected_pairs(dana, [[x], [z], [y]])

    again = json.loads(lcli("ls", "sync", "--project", pid, "--json").stdout)
    assert (again["new"], again["updated"], again["deleted"], again["quarantined"]) == (0, 0, 0, 0)


def test_ai_rankings_become_predictions_once(lcli, sqlite_url, ls_env, tmp_path):
    server = ls_env
    prompt, responses = unique("Is the sky blue?"), [unique("yes"), unique("no"), unique("sometimes")]
    judged = tmp_path / "judged.jsonl"
    judged.write_text(
        json.dumps(
            {
                "prompt": prompt,
                "responses": responses,
                "ranking": [[2], [0], [1]],
                "annotator": "judge-alpha",
                "annotator_kind": "ai",
            }
        )
        + "\n"
    )
    lcli("import", "rankings", judged)
    pid = json.loads(lcli("ls", "init", "--title", unique("predictions"), "--json").stdout)["project_id"]
    lcli("ls", "push", "--project", pid)
    (task,) = tasks(sqlite_url)
    by_text = dict(zip(task["texts"], task["shown"]))

    first = json.loads(lcli("ls", "predict", "--project", pid, "--json").stdout)
    assert first["uploaded"] == 1 and first["judges"] == {"judge-alpha": 1}
    (prediction,) = server.sdk().predictions.list(task=task["id"])
    assert prediction.model_version == "judge-alpha"
    assert prediction.result[0]["value"]["ranker"]["rank"] == [
        item(by_text[r]) for r in (responses[2], responses[0], responses[1])
    ]
    again = json.loads(lcli("ls", "predict", "--project", pid, "--json").stdout)
    assert (again["uploaded"], again["existing"]) == (0, 1)
    # Predictions are hidden from annotators unless asked for; three annotators see each task.
    remote = server.sdk().projects.get(pid)
    assert remote.show_collab_predictions is False
    assert (remote.maximum_annotations, remote.overlap_cohort_percentage) == (3, 100)


def test_push_adds_new_prompts_and_candidate_sets_and_recovers_unrecorded_tasks(lcli, sqlite_url, ls_env, tmp_path):
    server = ls_env
    first = unique("Define entropy.")
    lcli("import", "prompts", write_prompts(tmp_path / "a.jsonl", {first: [unique("e1"), unique("e2")]}))
    pid = json.loads(lcli("ls", "init", "--title", unique("push"), "--json").stdout)["project_id"]
    assert json.loads(lcli("ls", "push", "--project", pid, "--json").stdout)["created"] == 1

    # A new prompt, and a third candidate for the first prompt: two new tasks; the old one stays.
    second = unique("Define enthalpy.")
    lcli(
        "import",
        "prompts",
        write_prompts(tmp_path / "b.jsonl", {first: [unique("e3")], second: [unique("h1"), unique("h2")]}),
    )
    assert json.loads(lcli("ls", "push", "--project", pid, "--json").stdout)["created"] == 2
    pushed = tasks(sqlite_url)
    assert sorted(len(t["shown"]) for t in pushed) == [2, 2, 3]
    assert len(list(server.sdk().tasks.list(project=pid))) == 3

    # A push that created tasks in Label Studio but stopped before recording them: the next one adopts them.
    with session(sqlite_url) as s, s.begin():
        from sqlalchemy import delete

        from preflab.db.models import LSTask

        s.execute(delete(LSTask))
    again = json.loads(lcli("ls", "push", "--project", pid, "--json").stdout)
    assert (again["created"], again["adopted"]) == (0, 3)
    assert tasks(sqlite_url) == pushed
    assert len(list(server.sdk().tasks.list(project=pid))) == 3
