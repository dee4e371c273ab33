"""The round trip through a real Label Studio: push, annotate as three users, sync, pairs."""

import json

from sqlalchemy import func, select

from preflab.db.models import LSTask, Ranking, RawRecord
from tests.labelling.ls_helpers import (
    comparisons,
    expected_pairs,
    item,
    ranker_result,
    rankings,
    tasks,
    unique,
    write_prompts,
)


def test_push_annotate_sync_and_build_pairs(cli, db_url, ls_env, tmp_path):
    server = ls_env
    prompts = {
        unique("Explain recursion."): [unique(f"recursion answer {i}") for i in range(4)],
        unique("Name a prime."): [unique(f"prime answer {i}") for i in range(3)],
    }
    cli("import", "prompts", write_prompts(tmp_path / "prompts.jsonl", prompts))
    project = json.loads(
        cli("ls", "init", "--template", "ranking_tiers", "--title", unique("round trip"), "--json").stdout
    )
    pid = project["project_id"]
    pushed = json.loads(cli("ls", "push", "--project", pid, "--json").stdout)
    assert pushed["created"] == 2
    # Pushing again creates nothing twice.
    assert json.loads(cli("ls", "push", "--project", pid, "--json").stdout)["created"] == 0

    sdk = server.sdk()
    remote = {t.id: t.data for t in sdk.tasks.list(project=pid)}
    first, second = tasks(db_url)
    assert set(remote) == {first["id"], second["id"]}
    for task in (first, second):  # the task shows the candidates in the order preflab stored
        assert [i["body"] for i in remote[task["id"]]["items"]] == task["texts"]
        assert [i["id"] for i in remote[task["id"]]["items"]] == [item(c) for c in task["shown"]]
        assert remote[task["id"]]["prompt"] == task["prompt"]

    alice, bob, carol = (f"{name}-{pid}@preflab.test" for name in ("alice", "bob", "carol"))
    ids = {email: server.signup(email) for email in (alice, bob, carol)}
    a, b, c, d = first["shown"] if len(first["shown"]) == 4 else second["shown"]
    four = first if len(first["shown"]) == 4 else second
    three = second if four is first else first
    x, y, z = three["shown"]
    # alice: a strict ranking (one candidate per bucket); bob: ties, one left unranked; carol: skipped.
    sdk.annotations.create(
        four["id"],
        completed_by=ids[alice],
        result=ranker_result(
            {"tier_1": [item(c)], "tier_2": [item(a)], "tier_3": [item(d)], "tier_4": [item(b)], "_": []}
        ),
    )
    sdk.annotations.create(
        four["id"],
        completed_by=ids[bob],
        result=ranker_result(
            {"tier_1": [item(b), item(a)], "tier_2": [item(c)], "tier_3": [], "tier_4": [], "_": [item(d)]}
        ),
    )
    sdk.annotations.create(four["id"], completed_by=ids[carol], was_cancelled=True, result=[])
    sdk.annotations.create(
        three["id"],
        completed_by=ids[alice],
        result=ranker_result({"tier_1": [item(z)], "tier_2": [item(x)], "tier_3": [item(y)], "tier_4": [], "_": []}),
    )

    summary = json.loads(cli("ls", "sync", "--project", pid, "--json").stdout)
    assert (summary["new"], summary["skipped"], summary["quarantined"], summary["unchanged"]) == (4, 1, 0, 0)

    stored = {(r["annotator"], r["task"]): r for r in rankings(db_url)}
    assert stored[(alice, four["id"])]["tiers"] == [[c], [a], [d], [b]]
    assert stored[(bob, four["id"])]["tiers"] == [sorted([a, b]), [c]]
    assert stored[(carol, four["id"])]["status"] == "skipped" and stored[(carol, four["id"])]["tiers"] == []
    assert stored[(alice, three["id"])]["tiers"] == [[z], [x], [y]]
    for r in stored.values():
        assert r["kind"] == "human" and r["ls_user_id"] == ids[r["annotator"]]
        assert r["shown"] == (four if r["task"] == four["id"] else three)["shown"]
        assert r["status"] in ("valid", "skipped") and r["version"] == 1

    built = json.loads(cli("pairs", "build", "--json").stdout)
    expected = (
        expected_pairs(alice, [[c], [a], [d], [b]])
        | expected_pairs(bob, [[a, b], [c]])
        | expected_pairs(alice, [[z], [x], [y]])
    )
    assert comparisons(db_url) == expected
    assert built["pairs"] == len(expected) == 6 + 2 + 3

    # Syncing again finds nothing new and writes nothing.
    from tests.labelling.ls_helpers import session

    def counts():
        with session(db_url) as s:
            return tuple(s.scalar(select(func.count()).select_from(t)) for t in (Ranking, RawRecord, LSTask))

    before = counts()
    again = json.loads(cli("ls", "sync", "--project", pid, "--json").stdout)
    assert (again["new"], again["updated"], again["unchanged"], again["deleted"]) == (0, 0, 4, 0)
    assert counts() == before
