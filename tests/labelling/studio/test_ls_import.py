"""`ls import`: Label Studio JSON export files, from projects preflab did and did not create."""

import json

from sqlalchemy import func, select

from preflab.db.models import Ranking, RawRecord
from tests.labelling.ls_fixtures import make_cli
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

# A project someone else made, in the style of Label Studio's "LLM Ranker" template:
# different field names, two buckets, and annotations in every shape Label Studio has written.
ANSWERS = [
    {"id": "llama", "title": "Llama", "text": "Jobs change; history says more are made than lost."},
    {"id": "cobra", "title": "Cobra", "text": "AI will replace every job."},
    {"id": "puma", "title": "Puma", "text": "It depends on regulation and retraining."},
]


def ranker(value, name="rank"):
    return {"from_name": name, "to_name": "answers", "type": "ranker", "value": {"ranker": value}}


def foreign_export() -> list[dict]:
    data = {"task": "Rank by relevance.", "prompt": "What will AI do to jobs?", "answers": ANSWERS}
    return [
        {
            "id": 1,
            "project": 42,
            "data": data,
            "annotations": [
                {
                    "id": 11,
                    "completed_by": 5,
                    "was_cancelled": False,
                    "updated_at": "2024-01-02T00:00:00Z",
                    "result": [ranker({"relevant": ["puma", "llama"], "biased": ["cobra"], "_": []})],
                },
                {
                    "id": 12,
                    "completed_by": {"id": 6, "email": "old@example.com"},
                    "result": [ranker(["llama", "puma", "cobra"])],
                },
                {"id": 13, "completed_by": 7, "was_cancelled": True, "result": []},
            ],
        },
        {
            "id": 2,
            "project": 42,
            "data": data,
            "annotations": [
                {"id": 21, "completed_by": 5, "result": [ranker({"rank": ["cobra", "puma", "llama"]})]},
                {"id": 22, "completed_by": 5, "result": [ranker({"rank": ["cobra", "wolf", "llama"]})]},
                {"id": 23, "completed_by": 5, "result": []},
                {"id": 24, "completed_by": 5, "result": [ranker({"rank": ["puma", "puma", "llama"]})]},
                {"id": 25, "completed_by": 5, "result": [{"type": "textarea", "value": {"text": ["meh"]}}]},
            ],
        },
        {
            "id": 3,
            "project": 42,
            "data": {"answers": ANSWERS},
            "annotations": [
                {"id": 31, "completed_by": 5, "result": [ranker({"rank": ["cobra", "puma", "llama"]})]},
            ],
        },
        ["not", "a", "task"],
    ]


def test_import_of_a_foreign_project_with_other_field_names(lcli, sqlite_url, tmp_path):
    export = tmp_path / "project-42-at-2024.json"
    export.write_text(json.dumps(foreign_export()), encoding="utf-8")
    args = (
        "ls",
        "import",
        export,
        "--items-field",
        "answers",
        "--text-field",
        "text",
        "--buckets",
        "relevant,biased",
        "--json",
    )
    summary = json.loads(lcli(*args).stdout)
    assert (summary["tasks"], summary["annotations"], summary["new"], summary["skipped"], summary["quarantined"]) == (
        3,
        9,
        4,
        1,
        6,
    )
    assert summary["reasons"] == {
        "task is not an object with an annotations list": 1,
        "unknown item id 'wolf' in ranker 'rank'": 1,
        "empty result: nothing was ranked": 1,
        "item 'puma' is ranked twice": 1,
        "no ranker or pairwise result (result types: textarea)": 1,
        "task data has no 'prompt' field": 1,
    }

    with session(sqlite_url) as s:
        from preflab.db.models import Candidate, Prompt

        (prompt,) = s.scalars(select(Prompt)).all()
        assert prompt.text == "What will AI do to jobs?"
        cid = {c.text: c.id for c in s.scalars(select(Candidate))}
    llama, cobra, puma = (cid[a["text"]] for a in ANSWERS)
    got = {r["annotation"]: r for r in rankings(sqlite_url)}
    assert got[11]["tiers"] == [sorted([puma, llama]), [cobra]] and got[11]["annotator"] == "label-studio-user-5"
    assert got[12]["tiers"] == [[llama], [puma], [cobra]] and got[12]["annotator"] == "old@example.com"
    assert got[13]["status"] == "skipped"
    assert got[21]["tiers"] == [[cobra], [puma], [llama]]
    assert all(r["shown"] == [llama, cobra, puma] for r in got.values())

    lcli("pairs", "build")
    assert comparisons(sqlite_url) == (
        expected_pairs("label-studio-user-5", [[puma, llama], [cobra]])
        | expected_pairs("old@example.com", [[llama], [puma], [cobra]])
        | expected_pairs("label-studio-user-5", [[cobra], [puma], [llama]])
    )

    with session(sqlite_url) as s:
        quarantined = s.scalars(select(RawRecord.reason).where(RawRecord.status == "quarantined")).all()
        assert len(quarantined) == 6
        counts = (
            s.scalar(select(func.count()).select_from(RawRecord)),
            s.scalar(select(func.count()).select_from(Ranking)),
        )
    again = json.loads(lcli(*args).stdout)
    # What was quarantined is said again: 5 annotations and the task that is no task, still unusable.
    assert (again["new"], again["updated"], again["unchanged"], again["quarantined"], again["still_quarantined"]) == (
        0,
        0,
        4,
        0,
        6,
    )
    with session(sqlite_url) as s:
        assert (
            s.scalar(select(func.count()).select_from(RawRecord)),
            s.scalar(select(func.count()).select_from(Ranking)),
        ) == counts


def test_import_rejects_a_file_that_is_not_an_export(lcli, sqlite_url, tmp_path):
    bad = tmp_path / "rankings.jsonl"
    bad.write_text('{"prompt": "p"}\n{"prompt": "q"}\n')
    result = lcli("ls", "import", bad, expect_ok=False)
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"Error: {bad} is not a Label Studio JSON export (expected a JSON list of tasks)"
    ]


def test_import_of_a_server_export_matches_sync(lcli, sqlite_url, ls_env, tmp_path):
    server = ls_env
    prompt = unique("Translate 'cat' to French.")
    lcli("import", "prompts", write_prompts(tmp_path / "p.jsonl", {prompt: [unique("chat"), unique("chien")]}))
    pid = json.loads(lcli("ls", "init", "--title", unique("export"), "--json").stdout)["project_id"]
    lcli("ls", "push", "--project", pid)
    (task,) = tasks(sqlite_url)
    first, second = task["shown"]
    user = server.signup(f"gus-{pid}@preflab.test")
    sdk = server.sdk()
    sdk.annotations.create(task["id"], completed_by=user, result=ranker_result({"rank": [item(second), item(first)]}))
    sdk.annotations.create(task["id"], was_cancelled=True, result=[])
    lcli("ls", "sync", "--project", pid)

    export = tmp_path / "export.json"
    export.write_bytes(b"".join(sdk.projects.exports.download_sync(pid, export_type="JSON")))
    # Into the database that synced the project: the same annotations, nothing new.
    same = json.loads(lcli("ls", "import", export, "--project", pid, "--json").stdout)
    assert (same["annotations"], same["new"], same["unchanged"]) == (2, 0, 2)

    # Into a fresh database, with no server: the same rankings.
    fresh_url = f"sqlite:///{tmp_path / 'fresh.db'}"
    fresh = json.loads(make_cli(fresh_url)("ls", "import", export, "--json").stdout)
    assert (fresh["new"], fresh["skipped"], fresh["quarantined"]) == (2, 1, 0)

    def by_annotation(url):
        with session(url) as s:
            from preflab.db.models import Candidate

            text = dict(s.execute(select(Candidate.id, Candidate.text)).all())
        return {r["annotation"]: (r["status"], [[text[c] for c in t] for t in r["tiers"]]) for r in rankings(url)}

    assert by_annotation(fresh_url) == by_annotation(sqlite_url)
