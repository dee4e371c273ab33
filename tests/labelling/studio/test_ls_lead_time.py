"""Label Studio's `lead_time` (seconds an annotator spent on a task) is kept on each ranking."""

import json

from sqlalchemy import select

from preflab.db.models import Ranking
from tests.labelling.ls_helpers import item, ranker_result, session, tasks, unique, write_prompts


def lead_times(database_url: str) -> dict[int, float | None]:
    """Label Studio annotation id -> the ranking's stored lead time."""
    with session(database_url) as s:
        return dict(s.execute(select(Ranking.ls_annotation_id, Ranking.lead_time)).all())


def test_sync_stores_each_annotations_lead_time(lcli, sqlite_url, ls_env, tmp_path):
    server = ls_env
    prompt = unique("Pick the clearest answer.")
    lcli("import", "prompts", write_prompts(tmp_path / "p.jsonl", {prompt: [unique(f"answer {i}") for i in range(3)]}))
    pid = json.loads(lcli("ls", "init", "--title", unique("lead time"), "--json").stdout)["project_id"]
    lcli("ls", "push", "--project", pid)
    (task,) = tasks(sqlite_url)
    x, y, z = task["shown"]
    sdk = server.sdk()
    timed, untimed = (server.signup(f"{name}-{pid}@preflab.test") for name in ("timed", "untimed"))
    first = sdk.annotations.create(
        task["id"], completed_by=timed, lead_time=12.5, result=ranker_result({"rank": [item(z), item(x), item(y)]})
    )
    second = sdk.annotations.create(
        task["id"], completed_by=untimed, result=ranker_result({"rank": [item(y), item(z), item(x)]})
    )
    lcli("ls", "sync", "--project", pid)
    got = lead_times(sqlite_url)
    assert got[first.id] == 12.5
    # An API write without one: sync stores what Label Studio holds (it may record none, null), never a guess.
    assert got[second.id] == sdk.annotations.get(second.id).lead_time


def test_import_keeps_sane_lead_times_and_drops_the_rest(lcli, sqlite_url, tmp_path):
    answers = [{"id": f"a{i}", "body": f"answer {i}"} for i in range(3)]
    annotations = [
        {"id": 100 + n, "completed_by": 5 + n, "lead_time": lead, "result": ranker_result({"rank": ["a2", "a0", "a1"]})}
        for n, lead in enumerate([3.25, 7, "12", -1, True, None])
    ]
    annotations.append({"id": 199, "completed_by": 40, "result": ranker_result({"rank": ["a0", "a1", "a2"]})})
    export = tmp_path / "export.json"
    export.write_text(
        json.dumps([{"id": 1, "data": {"prompt": "Rank these.", "items": answers}, "annotations": annotations}]),
        encoding="utf-8",
    )
    summary = json.loads(lcli("ls", "import", export, "--json").stdout)
    assert (summary["new"], summary["quarantined"]) == (7, 0)
    assert lead_times(sqlite_url) == {100: 3.25, 101: 7.0, 102: None, 103: None, 104: None, 105: None, 199: None}
