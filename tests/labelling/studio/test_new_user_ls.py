"""A new user's first hour with Label Studio: one server under any spelling, and pushes that say what they skipped."""

import json

from sqlalchemy import func, select

from preflab.db.models import LSProject
from tests.labelling.ls_fixtures import reserved_port
from tests.labelling.ls_helpers import session, unique, write_prompts
from tests.labelling.studio.test_ls_errors import forward_later


def test_the_same_server_under_another_spelling_is_the_same_server(lcli, sqlite_url, ls_env, monkeypatch, tmp_path):
    server = ls_env
    port = server.url.rsplit(":", 1)[1]
    prompt = unique("Which is heavier?")
    lcli("import", "prompts", write_prompts(tmp_path / "p.jsonl", {prompt: [unique("lead"), unique("feathers")]}))
    monkeypatch.setenv("LABEL_STUDIO_URL", f"http://127.0.0.1:{port}")
    pid = json.loads(lcli("ls", "init", "--title", unique("spelling"), "--json").stdout)["project_id"]

    monkeypatch.setenv("LABEL_STUDIO_URL", f"http://localhost:{port}/")
    pushed = lcli("ls", "push")
    assert pushed.output.strip() == f"created 1 task in project {pid} (0 already there, 0 recovered)"
    synced = json.loads(lcli("ls", "sync", "--json").stdout)
    assert synced["project"] == pid
    with session(sqlite_url) as s:
        assert s.scalar(select(func.count()).select_from(LSProject)) == 1


def test_an_unknown_server_lists_the_projects_preflab_knows(lcli, sqlite_url, ls_env, monkeypatch):
    server = ls_env
    title = unique("known")
    pid = json.loads(lcli("ls", "init", "--title", title, "--json").stdout)["project_id"]
    # The same Label Studio reached through another address preflab cannot tell is the same.
    listener = reserved_port()
    other = listener.getsockname()[1]
    host, port = server.url.removeprefix("http://").split(":")
    forward_later(listener, (host, int(port)), delay=0)
    monkeypatch.setenv("LABEL_STUDIO_URL", f"http://127.0.0.1:{other}")
    result = lcli("ls", "push", expect_ok=False)
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == (
        f"Error: preflab has no Label Studio project at http://127.0.0.1:{other}; it knows project {pid} "
        f'"{title}" at {server.url}. If one of these servers is this one under another address, set '
        "LABEL_STUDIO_URL (or --label-studio-url) to that address; else create a project with `preflab ls init`"
    )


def test_push_says_which_prompts_it_skipped_and_why(lcli, sqlite_url, ls_env, tmp_path):
    prompts = {unique("ready"): [unique("a"), unique("b")], unique("bare"): [], unique("half"): [unique("c")]}
    lcli("import", "prompts", write_prompts(tmp_path / "p.jsonl", prompts))
    pid = json.loads(lcli("ls", "init", "--title", unique("skips"), "--json").stdout)["project_id"]

    text = lcli("ls", "push", "--project", pid).output.strip().splitlines()
    assert text[0] == f"created 1 task in project {pid} (0 already there, 0 recovered)"
    assert text[1] == (
        "skipped 2 prompts: 1 with no candidates (id 2), 1 with only one candidate (id 3); "
        "a task needs two or more candidates (make them with `preflab generate`)"
    )
    report = json.loads(lcli("ls", "push", "--project", pid, "--json").stdout)
    assert report["created"] == 0 and report["existing"] == 1
    assert report["skipped"] == {"no_candidates": 1, "one_candidate": 1}
    assert report["skipped_prompt_ids"] == {"no_candidates": [2], "one_candidate": [3]}


def test_push_with_a_limit_says_how_many_tasks_wait(lcli, sqlite_url, ls_env, tmp_path):
    prompts = {unique(f"prompt {i}"): [unique("x"), unique("y")] for i in range(3)}
    lcli("import", "prompts", write_prompts(tmp_path / "p.jsonl", prompts))
    pid = json.loads(lcli("ls", "init", "--title", unique("limit"), "--json").stdout)["project_id"]
    assert lcli("ls", "push", "--project", pid, "--limit", 1).output.strip() == (
        f"created 1 task in project {pid} (0 already there, 0 recovered; 2 more tasks left by --limit)"
    )
    report = json.loads(lcli("ls", "push", "--project", pid, "--json").stdout)
    assert (report["created"], report["existing"], report["waiting"]) == (2, 1, 0)
