"""What `ls sync` says, against a real Label Studio: tier positions kept, skips counted, one "identical" count."""

import json

from sqlalchemy import select

from preflab.db.models import Comparison
from tests.labelling.ls_helpers import item, ranker_result, session, tasks, unique, write_prompts


def project_with_one_task(lcli, tmp_path, template: str, n: int = 3):
    prompt = unique(f"Rank these ({template}).")
    lcli("import", "prompts", write_prompts(tmp_path / "p.jsonl", {prompt: [unique(f"r{i}") for i in range(n)]}))
    pid = json.loads(lcli("ls", "init", "--template", template, "--title", unique(template), "--json").stdout)[
        "project_id"
    ]
    lcli("ls", "push", "--project", pid)
    return pid


def margins(url: str) -> dict[tuple[int, int], float]:
    with session(url) as s:
        return {
            (c, r): m for c, r, m in s.execute(select(Comparison.chosen_id, Comparison.rejected_id, Comparison.margin))
        }


def test_an_empty_tier_between_two_keeps_them_apart(lcli, sqlite_url, ls_env, tmp_path):
    server = ls_env
    pid = project_with_one_task(lcli, tmp_path, "ranking_tiers")
    (task,) = tasks(sqlite_url)
    a, b, c = task["shown"]
    user = server.signup(f"ivy-{pid}@preflab.test")
    # Tier 1 and Tier 3, Tier 2 left empty; Tier 4 holds the last.
    server.sdk().annotations.create(
        task["id"],
        completed_by=user,
        result=ranker_result({"tier_1": [item(a)], "tier_2": [], "tier_3": [item(b)], "tier_4": [item(c)], "_": []}),
    )
    lcli("ls", "sync", "--project", pid)

    lcli("pairs", "build")
    assert margins(sqlite_url) == {(a, b): 2.0, (a, c): 3.0, (b, c): 1.0}
    lcli("pairs", "build", "--strategy", "adjacent")
    assert margins(sqlite_url) == {(a, b): 2.0, (b, c): 1.0}
    lcli("pairs", "build", "--strategy", "best-vs-worst")
    assert margins(sqlite_url) == {(a, c): 3.0}

    # Moving b from Tier 3 to Tier 2 is an edit of the ranking, though the order stays.
    (annotation,) = server.sdk().annotations.list(id=task["id"])
    server.sdk().annotations.update(
        annotation.id,
        result=ranker_result({"tier_1": [item(a)], "tier_2": [item(b)], "tier_3": [], "tier_4": [item(c)], "_": []}),
    )
    assert json.loads(lcli("ls", "sync", "--project", pid, "--json").stdout)["updated"] == 1
    lcli("pairs", "build")
    assert margins(sqlite_url) == {(a, b): 1.0, (a, c): 3.0, (b, c): 2.0}


def test_sync_and_stats_count_the_same_untouched_rankings_and_every_skip(lcli, sqlite_url, ls_env, tmp_path):
    server = ls_env
    pid = project_with_one_task(lcli, tmp_path, "ranking")
    (task,) = tasks(sqlite_url)
    x, y, z = task["shown"]
    kim, lee = (server.signup(f"{n}-{pid}@preflab.test") for n in ("kim", "lee"))
    sdk = server.sdk()
    as_shown = sdk.annotations.create(
        task["id"], completed_by=kim, result=ranker_result({"rank": [item(x), item(y), item(z)]})
    )
    sdk.annotations.create(task["id"], completed_by=lee, was_cancelled=True, result=[])

    first = lcli("ls", "sync", "--project", pid).output.strip()
    assert first == (
        f"synced project {pid}: 1 task, 2 annotations: 2 new, 0 updated, 0 unchanged, 0 quarantined, "
        "0 deleted; the project holds 1 skipped annotation and 1 valid ranking identical to the order "
        "shown"
    )
    assert "1 valid ranking identical to the order shown" in lcli("stats").output

    # Nothing new: the skip is still there, and still said.
    again = lcli("ls", "sync", "--project", pid).output.strip()
    assert again.endswith(
        "2 annotations: 0 new, 0 updated, 2 unchanged, 0 quarantined, 0 deleted; the project "
        "holds 1 skipped annotation and 1 valid ranking identical to the order shown"
    )

    # kim reorders: the untouched ranking is superseded, in the sync's count as in stats'.
    sdk.annotations.update(as_shown.id, result=ranker_result({"rank": [item(z), item(x), item(y)]}))
    report = json.loads(lcli("ls", "sync", "--project", pid, "--json").stdout)
    assert (report["updated"], report["skipped"], report["same_as_shown"]) == (1, 1, 0)
    assert json.loads(lcli("stats", "--json").stdout)["counts"]["same_as_shown"] == 0
    assert "0 valid rankings identical to the order shown" in lcli("stats").output
