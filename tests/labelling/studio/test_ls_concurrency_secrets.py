"""Two `ls sync` of one project at once, as real processes; and secrets that never leave the environment.

Both against the real Label Studio server; the syncs on SQLite and on the real Postgres server.
"""

import json
import logging
import os
import secrets
import sqlite3
import subprocess
import sys

import pytest
from click.testing import CliRunner

from preflab.cli import cli as root
from tests.db.procs import counts, dangling, finish, rows, writes_held
from tests.labelling.ls_helpers import item, ranker_result, record_backoff, tasks, unique, write_prompts

N_TASKS = 12


def annotated_project(cli, db_url, server, tmp_path, n_tasks=N_TASKS) -> int:
    """A pushed project whose every task is ranked by two people (tiers) and skipped by nobody."""
    prompts = {unique(f"Prompt {i}"): [unique(f"answer {i}.{j}") for j in range(3)] for i in range(n_tasks)}
    cli("import", "prompts", write_prompts(tmp_path / "prompts.jsonl", prompts))
    pid = json.loads(
        cli("ls", "init", "--template", "ranking_tiers", "--title", unique("concurrent"), "--json").stdout
    )["project_id"]
    cli("ls", "push", "--project", pid)
    sdk = server.sdk()
    users = [server.signup(f"{name}-{pid}@preflab.test") for name in ("ann", "ben")]
    for task in tasks(db_url):
        a, b, c = task["shown"]
        sdk.annotations.create(
            task["id"],
            completed_by=users[0],
            result=ranker_result(
                {"tier_1": [item(c)], "tier_2": [item(a), item(b)], "tier_3": [], "tier_4": [], "_": []}
            ),
        )
        sdk.annotations.create(
            task["id"],
            completed_by=users[1],
            result=ranker_result(
                {"tier_1": [item(a)], "tier_2": [item(b)], "tier_3": [item(c)], "tier_4": [], "_": []}
            ),
        )
    return pid


def sync_process(url: str, pid: int) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "preflab",
            "--database-url",
            url,
            "ls",
            "sync",
            "--project",
            str(pid),
            "--page-size",
            "4",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_syncs_of_one_project_at_once(cli, db_url, ls_env, tmp_path):
    pid = annotated_project(cli, db_url, ls_env, tmp_path)
    before = counts(db_url)
    procs = []
    with writes_held(db_url, procs):
        procs.extend(sync_process(db_url, pid) for _ in range(2))
    results = [finish(p) for p in procs]
    for code, _, err in results:
        assert code == 0 and not err.strip(), err
    first, second = (json.loads(out) for _, out, _ in results)
    assert first["new"] + second["new"] == 2 * N_TASKS  # each annotation became a ranking once
    assert first["unchanged"] + second["unchanged"] == 2 * N_TASKS
    assert first["quarantined"] == second["quarantined"] == 0
    together = consistent_ls(db_url)
    assert together["rankings"] == 2 * N_TASKS and together["ranking_items"] == 6 * N_TASKS

    # The same two syncs one after another add exactly what the two at once did.
    again = json.loads(cli("ls", "sync", "--project", pid, "--json").stdout)
    assert (again["new"], again["unchanged"]) == (0, 2 * N_TASKS)
    assert counts(db_url) == together
    assert {k: together[k] - before[k] for k in together} == {
        "prompts": 0,
        "candidates": 0,
        "annotators": 2,
        "rankings": 2 * N_TASKS,
        "ranking_items": 6 * N_TASKS,
        "raw_records": N_TASKS + 2 * N_TASKS,
    }  # a raw record per task and per annotation


def consistent_ls(url: str) -> dict:
    """No annotation twice, every ranking whole, every stored annotation turned into its ranking,
    and every reference without a constraint leads to its row."""
    assert dangling(url) == {}
    assert (
        rows(url, "SELECT ls_annotation_id FROM rankings GROUP BY ls_project_id, ls_annotation_id HAVING count(*) > 1")
        == []
    )
    assert rows(url, "SELECT ranking_id FROM ranking_items GROUP BY ranking_id HAVING count(*) <> 3") == []
    assert (
        rows(
            url,
            "SELECT id FROM raw_records WHERE source = 'label-studio' AND status = 'ok' "
            "AND id NOT IN (SELECT raw_record_id FROM rankings)",
        )
        == []
    )
    return counts(url)


# --- secrets -------------------------------------------------------------------------------------


def database_dump(url: str) -> str:
    """Every byte of the database as text: SQLite's own dump."""
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return "\n".join(conn.iterdump())


# On SQLite only: what is checked is what preflab writes, logs and prints, the same on either database (the same
# ORM writes the same columns); how Postgres stores it is not in question, and the run is 25 s of Label Studio.
@pytest.mark.one_database
def test_secrets_never_leave_the_environment(cli, db_url, ls_env, tmp_path, monkeypatch, caplog):
    hf_token = f"hf_preflabSecret{secrets.token_hex(12)}"
    monkeypatch.setenv("HF_TOKEN", hf_token)
    good_key = os.environ["LABEL_STUDIO_API_KEY"]  # the test server's own random token
    pid = annotated_project(cli, db_url, ls_env, tmp_path, n_tasks=2)
    cli("pairs", "build")  # so that the export below gets as far as the Hub
    caplog.set_level(logging.DEBUG)  # every library's log records, httpx's included
    seen: list[str] = []

    def run(*args, key=good_key, url=ls_env.url):
        """In a real process (--verbose), then in this one (its log records)."""
        env = {**os.environ, "LABEL_STUDIO_API_KEY": key, "LABEL_STUDIO_URL": url}
        proc = subprocess.run(
            [sys.executable, "-m", "preflab", "--verbose", "--database-url", db_url, *args],
            capture_output=True,
            text=True,
            env=env,
        )
        seen.extend([proc.stdout, proc.stderr])
        monkeypatch.setenv("LABEL_STUDIO_API_KEY", key)
        monkeypatch.setenv("LABEL_STUDIO_URL", url)
        result = CliRunner().invoke(root, ["--verbose", "--database-url", db_url, *args])
        seen.append(result.output)
        if result.exception and not isinstance(result.exception, SystemExit):
            seen.append(repr(result.exception))
        return proc.returncode, result.exit_code

    record_backoff(monkeypatch)  # not slept in this process (the real process above sleeps it)
    wrong_key = f"lsk-preflabWrong{secrets.token_hex(12)}"
    assert run("ls", "sync", "--project", str(pid)) == (0, 0)
    assert run("ls", "sync", "--project", str(pid), key=wrong_key) == (1, 1)  # refused by the server
    assert run("ls", "sync", "--project", str(pid), url="http://127.0.0.1:9") == (1, 1)  # nothing listens
    assert run("export", str(tmp_path / "out"), "--hub", "someone/prefs") == (1, 1)  # the Hub is out of reach
    seen.extend(record.getMessage() for record in caplog.records)
    seen.extend(str(record.args) for record in caplog.records)
    seen.append(database_dump(db_url))

    everything = "\n".join(seen)
    assert "synced project" in everything and "Error:" in everything  # the runs did what they should
    for secret in (good_key, wrong_key, hf_token):
        assert secret not in everything
