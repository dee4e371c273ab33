"""One annotation, one ranking, one person: however it arrives (sync, Label Studio's JSON or JSON_MIN export).

Against the real Label Studio, on SQLite and on the real Postgres server: a project is
synced, then exported by Label Studio itself and the files imported into the same
database, with no server URL, with and without --project.
"""

import json

from preflab.db.models import Annotator, Candidate, Prompt, Ranking, RankingItem
from preflab.errors import EXIT_ALL_QUARANTINED
from tests.db.procs import counts, rows
from tests.labelling.ls_helpers import item, ranker_result, tasks, unique, write_prompts

N_TASKS = 4
STORED = (Prompt, Candidate, Annotator, Ranking, RankingItem)  # raw records aside: each file is kept as received


def synced_project(cli, db_url, server, tmp_path) -> tuple[int, dict]:
    """A pushed project ranked by two people on every task, one skip, and two annotations ranking an
    item the task does not have; synced once. Returns its id and the first sync's summary."""
    prompts = {unique(f"Prompt {i}"): [unique(f"answer {i}.{j}") for j in range(3)] for i in range(N_TASKS)}
    cli("import", "prompts", write_prompts(tmp_path / "prompts.jsonl", prompts))
    pid = json.loads(cli("ls", "init", "--title", unique("identity"), "--json").stdout)["project_id"]
    cli("ls", "push", "--project", pid)
    sdk = server.sdk()
    ann, ben, cal = (server.signup(f"{name}-{pid}@preflab.test") for name in ("ann", "ben", "cal"))
    for n, task in enumerate(tasks(db_url)):
        a, b, c = task["shown"]
        sdk.annotations.create(
            task["id"], completed_by=ann, result=ranker_result({"rank": [item(c), item(a), item(b)]}), lead_time=12.5
        )
        sdk.annotations.create(
            task["id"], completed_by=ben, result=ranker_result({"rank": [item(a), item(b), item(c)]})
        )
        if n < 2:  # an item id the task does not have: quarantined
            sdk.annotations.create(task["id"], completed_by=cal, result=ranker_result({"rank": [item(a), "c999999"]}))
    sdk.annotations.create(tasks(db_url)[0]["id"], was_cancelled=True, result=[])
    return pid, json.loads(cli("ls", "sync", "--project", pid, "--json").stdout)


def export(server, pid: int, kind: str, path):
    path.write_bytes(b"".join(server.sdk().projects.exports.download_sync(pid, export_type=kind)))
    return path


def stored(cli, db_url) -> dict:
    """The rows an import must not add to, and the pairs they make."""
    cli("pairs", "build")
    return counts(db_url, STORED) | {"pairs": rows(db_url, "SELECT count(*) FROM comparisons")[0][0]}


def test_a_second_sync_says_what_is_still_quarantined(cli, db_url, ls_env, tmp_path):
    pid, first = synced_project(cli, db_url, ls_env, tmp_path)
    assert (first["new"], first["quarantined"]) == (2 * N_TASKS + 1, 2)
    again = cli("ls", "sync", "--project", pid)
    assert (
        f"{2 * N_TASKS + 3} annotations: 0 new, 0 updated, 9 unchanged, 2 still quarantined, 0 deleted" in again.stdout
    )
    assert again.stderr == "see what was quarantined with: preflab quarantine list --source label-studio\n"
    assert json.loads(cli("ls", "sync", "--project", pid, "--json").stdout)["still_quarantined"] == 2


def test_label_studio_exports_of_a_synced_project_add_nothing(cli, db_url, ls_env, tmp_path, monkeypatch):
    server = ls_env
    pid, _ = synced_project(cli, db_url, server, tmp_path)
    as_json, as_min = (
        export(server, pid, "JSON", tmp_path / "export.json"),
        export(server, pid, "JSON_MIN", tmp_path / "min.json"),
    )
    before = stored(cli, db_url)
    monkeypatch.delenv("LABEL_STUDIO_URL")  # a file read with no server: its tasks say which project it is

    for args in ((as_json,), (as_json, "--project", pid), (as_min,), (as_min, "--project", pid)):
        summary = json.loads(cli("ls", "import", *args, "--json").stdout)
        assert (summary["new"], summary["updated"]) == (0, 0), args
        assert stored(cli, db_url) == before, args  # no ranking, no person, no pair added
    json_min = json.loads(cli("ls", "import", as_min, "--json").stdout)
    # JSON_MIN holds every annotation but the skip: each read as the annotation sync stored.
    assert (json_min["tasks"], json_min["annotations"], json_min["unchanged"]) == (
        2 * N_TASKS + 2,
        2 * N_TASKS + 2,
        2 * N_TASKS,
    )
    assert json_min["project"] == pid
    lead_times = rows(db_url, "SELECT lead_time FROM rankings WHERE lead_time IS NOT NULL")
    assert sorted(lead_times) == [(12.5,)] * N_TASKS

    # CSV and TSV lose the JSON rankings are in: one sentence naming the export types to choose.
    for kind in ("CSV", "TSV"):
        flat = export(server, pid, kind, tmp_path / f"export.{kind.lower()}")
        result = cli("ls", "import", flat, expect_ok=False)
        assert result.exit_code == 1 and result.output == (
            f"Error: {flat} is a {kind} export, which loses the JSON that rankings are kept in: export the project "
            "from Label Studio as JSON or JSON_MIN\n"
        )
    assert stored(cli, db_url) == before

    # A new annotation by a person preflab knows: an export names them by id only, sync by email.
    ben = server.users[f"ben-{pid}@preflab.test"][0]
    task = tasks(db_url)[-1]
    server.sdk().annotations.create(task["id"], completed_by=ben, was_cancelled=True, result=[])
    later = json.loads(cli("ls", "import", export(server, pid, "JSON", tmp_path / "later.json"), "--json").stdout)
    assert later["new"] == 1
    assert rows(db_url, "SELECT count(*) FROM annotators") == [(before["annotators"],)]
    assert rows(
        db_url,
        "SELECT a.name FROM rankings r JOIN annotators a ON a.id = r.annotator_id "
        "WHERE r.status = 'skipped' AND r.ls_task_id = " + str(task["id"]),
    ) == [(f"ben-{pid}@preflab.test",)]


def test_an_annotation_on_a_second_task_is_quarantined_not_moved(cli, db_url, ls_env, tmp_path, monkeypatch):
    pid, _ = synced_project(cli, db_url, ls_env, tmp_path)
    exported = json.loads(export(ls_env, pid, "JSON", tmp_path / "export.json").read_text())
    first, second = exported[0], exported[1]
    moved = next(a for a in first["annotations"] if a["result"] and len(a["result"][0]["value"]["ranker"]["rank"]) == 3)
    # The same annotation id on another task, ranking that task's items: not an edit of the first.
    ids = [i["id"] for i in second["data"]["items"]]
    second["annotations"] = [dict(moved, result=ranker_result({"rank": ids}), updated_at="2999-01-01T00:00:00Z")]
    before = stored(cli, db_url)
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps([second]))
    monkeypatch.delenv("LABEL_STUDIO_URL")
    result = cli("ls", "import", tampered, "--json", expect_ok=False)
    assert result.exit_code == EXIT_ALL_QUARANTINED
    summary = json.loads(result.stdout)
    assert (summary["new"], summary["updated"], summary["quarantined"]) == (0, 0, 1)
    assert summary["reasons"] == {
        f"annotation {moved['id']} was stored from task {first['id']}, and here it is on task {second['id']}: an "
        "annotation does not move to another task (is this export from another Label Studio server?)": 1
    }
    assert stored(cli, db_url) == before
