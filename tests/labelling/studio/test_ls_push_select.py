"""`preflab ls push --select STRATEGY --limit K` through a real Label Studio server.

Only the K chosen tasks reach Label Studio, and each stores why it was chosen
(`ls_tasks.selection`); a later plain push sends the rest, unselected.
"""

import json

from sqlalchemy import select

from preflab.db.models import LSTask, Prompt
from tests.db.helpers import ranking_line, write_lines
from tests.labelling.ls_helpers import session, unique
from tests.tiny_models import tiny_reward_model


def _selections(database_url: str) -> dict[str, dict | None]:
    with session(database_url) as s:
        return dict(s.execute(select(Prompt.text, LSTask.selection).join(Prompt, Prompt.id == LSTask.prompt_id)).all())


def test_push_select_disagreement_pushes_only_the_k_chosen_tasks(lcli, sqlite_url, ls_env, tmp_path):
    abc = [unique("answer a"), unique("answer b"), unique("answer c")]
    prompts = {name: unique(name) for name in ("agreed", "reversed", "swapped", "also agreed")}
    lines = []
    for name, second in (
        ("agreed", [[0], [1], [2]]),
        ("reversed", [[2], [1], [0]]),
        ("swapped", [[1], [0], [2]]),
        ("also agreed", [[0], [1], [2]]),
    ):
        lines.append(ranking_line(prompts[name], abc, [[0], [1], [2]], "judge-1", "ai"))
        lines.append(ranking_line(prompts[name], abc, second, "judge-2", "ai"))
    lcli("import", "rankings", write_lines(tmp_path / "judged.jsonl", lines))
    pid = json.loads(lcli("ls", "init", "--title", unique("select"), "--json").stdout)["project_id"]

    pushed = json.loads(lcli("ls", "push", "--project", pid, "--select", "disagreement", "--limit", 2, "--json").stdout)
    assert (pushed["created"], pushed["waiting"]) == (2, 2)
    remote = [t.data["prompt"] for t in ls_env.sdk().tasks.list(project=pid)]
    assert sorted(remote) == sorted([prompts["reversed"], prompts["swapped"]])
    stored = _selections(sqlite_url)
    assert stored[prompts["reversed"]]["strategy"] == "disagreement"
    assert stored[prompts["reversed"]]["score"] == 1.0
    assert abs(stored[prompts["swapped"]]["score"] - 1 / 3) < 1e-6
    assert "tau-b" in stored[prompts["swapped"]]["reason"]

    # A plain push sends the rest, with no selection recorded.
    assert json.loads(lcli("ls", "push", "--project", pid, "--json").stdout)["created"] == 2
    stored = _selections(sqlite_url)
    assert stored[prompts["agreed"]] is None and stored[prompts["also agreed"]] is None
    assert len(list(ls_env.sdk().tasks.list(project=pid))) == 4


def test_push_select_uncertainty_with_a_reward_model(lcli, sqlite_url, ls_env, tmp_path):
    rm = tiny_reward_model(tmp_path / "rm")
    lines = [
        ranking_line(
            unique(f"question {n}"), [unique(f"reply {n}.{i}") for i in range(3)], [[0], [1], [2]], "judge-1", "ai"
        )
        for n in range(5)
    ]
    lcli("import", "rankings", write_lines(tmp_path / "judged.jsonl", lines))
    pid = json.loads(lcli("ls", "init", "--title", unique("select rm"), "--json").stdout)["project_id"]
    out = lcli("ls", "push", "--project", pid, "--select", "uncertainty", "--reward-model", rm, "--limit", 1)
    assert "created 1 task" in out.stdout
    (chosen,) = list(_selections(sqlite_url).values())
    assert chosen["strategy"] == "uncertainty" and 0 < chosen["score"] <= 1
    assert len(list(ls_env.sdk().tasks.list(project=pid))) == 1


def test_push_select_says_what_is_missing(lcli, ls_env, tmp_path):
    lines = [ranking_line(unique("q"), [unique("x"), unique("y")], [[0], [1]], "alice", "human")]
    lcli("import", "rankings", write_lines(tmp_path / "r.jsonl", lines))
    pid = json.loads(lcli("ls", "init", "--title", unique("select bad"), "--json").stdout)["project_id"]
    result = lcli("ls", "push", "--project", pid, "--select", "uncertainty", expect_ok=False)
    assert result.exit_code != 0 and "needs --reward-model" in result.output
    result = lcli("ls", "push", "--project", pid, "--select", "disagreement", expect_ok=False)
    assert result.exit_code != 0 and "two AI rankings" in result.output
    assert list(ls_env.sdk().tasks.list(project=pid)) == []
