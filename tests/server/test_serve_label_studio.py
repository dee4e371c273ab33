"""`preflab serve` beside the real Label Studio, connected by `preflab ls connect`.

A real server process on a loopback port, the test suite's Label Studio calling it:
its own "Retrieve predictions" action stores a prediction on every task; annotations
created, edited and deleted through its API reach the store without `ls sync`; and the
server killed with SIGKILL while annotations are made, then restarted, leaves the store
exact. Every template on SQLite, one on Postgres too.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from label_studio_sdk.label_interface import LabelInterface
from sqlalchemy import func, select

from preflab.db.models import RawRecord
from preflab.labelling.studio.predict import prediction_result
from preflab.labelling.studio.webhooks import WEBHOOK_SOURCE
from preflab.templates import bucket_names
from tests.labelling.ls_fixtures import make_cli
from tests.labelling.ls_helpers import rankings, session, tasks, unique
from tests.server.conftest import DEFAULT_SERVED, SECRET, wait_until
from tests.server.predicting import hh_rows, import_hh
from tests.tiny_models import embedded_model_cache  # noqa: F401  (fixture)

JUDGE = "judge-e2e"  # an AI annotator whose stored rankings the server serves (no model to load)
DELIVERED_WITHIN = 15.0  # seconds for a delivery to reach the store (Label Studio, the server and SQLite share 2 cores)
# A judge's ranking and scores of each prompt's replies (indexes into them), and a person's ranking then their edit.
AI = {
    "ranking": ([[2], [0], [1]], [0.5, -1.0, 2.0]),
    "ranking_tiers": ([[2], [0, 1]], [0.1, 0.1, 1.5]),
    "pairwise": ([[1], [0]], [-0.3, 0.9]),
}
HUMAN = {
    "ranking": ([[0], [1], [2]], [[1], [2], [0]]),
    "ranking_tiers": ([[0, 1], [2]], [[2], [1], [0]]),
    "pairwise": ([[0], [1]], [[0, 1]]),
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Served:
    """`preflab serve --judge JUDGE` as a process on `port`, its log in a file (a pipe left unread could stall it);
    `judge=None`: no --judge (the current reward model, else the default model's likelihood judge)."""

    def __init__(self, database_url: str, log: Path, port: int | None = None, judge: str | None = JUDGE):
        self.database_url, self.log, self.judge = database_url, log, judge
        self.port = port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Served:
        env = {**os.environ, "PREFLAB_WEBHOOK_SECRET": SECRET}
        with self.log.open("a") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "preflab",
                    "--database-url",
                    self.database_url,
                    "serve",
                    "--port",
                    str(self.port),
                    *(["--judge", self.judge] if self.judge else []),
                    "--sync-every",
                    "off",
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"preflab serve did not answer /health:\n{self.log.read_text()}")

    def kill(self) -> None:
        self.proc.kill()  # SIGKILL: no shutdown, nothing flushed, whatever request is in flight
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def serve(ls_env, tmp_path, monkeypatch):
    """Start `preflab serve` on a database (Label Studio's URL and token in its environment)."""
    monkeypatch.setenv("PREFLAB_WEBHOOK_SECRET", SECRET)  # for `ls connect` too
    servers = []

    def start(database_url: str, port: int | None = None, judge: str | None = JUDGE) -> Served:
        servers.append(Served(database_url, tmp_path / "serve.log", port, judge).start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()
    log = (tmp_path / "serve.log").read_text() if (tmp_path / "serve.log").exists() else ""
    assert SECRET not in log and ls_env.token not in log  # no secret in the log, whatever happened


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_db(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'preflab.db'}"
    return request.getfixturevalue("postgres_url")


def connected_project(database_url: str, template: str, tmp_path: Path, serve, n_prompts: int = 3):
    """Prompts with a judge's stored rankings, pushed to a new project, which is connected to a new server.

    Returns (project id, server, the pushed tasks with each shown reply's index).
    """
    run = make_cli(database_url)
    tiers, scores = AI[template]
    replies = {
        unique(f"question {n} ({template})?"): [unique(f"reply {r} to {n}") for r in range(len(scores))]
        for n in range(n_prompts)
    }
    path = tmp_path / "judged.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {
                    "prompt": p,
                    "responses": r,
                    "ranking": tiers,
                    "scores": scores,
                    "annotator": JUDGE,
                    "annotator_kind": "ai",
                }
            )
            + "\n"
            for p, r in replies.items()
        )
    )
    run("import", "rankings", path)
    pid = json.loads(run("ls", "init", "--template", template, "--title", unique(template), "--json").stdout)[
        "project_id"
    ]
    run("ls", "push", "--project", pid)
    server = serve(database_url)
    out = json.loads(run("ls", "connect", server.url, "--project", pid, "--json").stdout)
    assert out["ml_backend"]["model_version"] == JUDGE and out["ml_backend"]["state"] == "Connected"
    pushed = tasks(database_url)
    for task in pushed:
        task["index"] = {cid: replies[task["prompt"]].index(text) for cid, text in zip(task["shown"], task["texts"])}
    return pid, server, pushed


def candidates(task: dict, tiers: list[list[int]]) -> list[list[int]]:
    """Tiers of reply indexes as the task's candidate ids (sorted in each tier, as the store gives them)."""
    by_index = {i: cid for cid, i in task["index"].items()}
    return [sorted(by_index[i] for i in tier) for tier in tiers]


def human_rankings(database_url: str) -> list[dict]:
    return [r for r in rankings(database_url) if r["kind"] == "human"]


def deliveries(database_url: str) -> dict[str, int]:
    """The webhook deliveries stored, by status."""
    with session(database_url) as s:
        return dict(
            s.execute(
                select(RawRecord.status, func.count())
                .where(RawRecord.source == WEBHOOK_SOURCE)
                .group_by(RawRecord.status)
            ).all()
        )


def email(word: str, project_id: int) -> str:
    """A Label Studio user's email unique to the project (the server is shared by the run)."""
    return f"{word}-{project_id}@preflab.test"


# Every template on SQLite; on Postgres the one with tiers. A template changes what Label Studio shows and sends
# (parsed the same on either database), and the store's writes of tiers, ties and orders are the same ORM's: the
# database's part is tested on both in tests/db and tests/labelling/studio.
@pytest.mark.parametrize(
    "template,db",
    [
        *[(template, "sqlite") for template in ("ranking", "ranking_tiers", "pairwise")],
        pytest.param("ranking_tiers", "postgres", marks=pytest.mark.postgres),
    ],
)
def test_predictions_and_annotations_flow_between_label_studio_and_the_server(
    template, db, request, ls_env, serve, tmp_path
):
    database_url = f"sqlite:///{tmp_path / 'preflab.db'}" if db == "sqlite" else request.getfixturevalue("postgres_url")
    pid, server, pushed = connected_project(database_url, template, tmp_path, serve)
    sdk = ls_env.sdk()
    config = sdk.projects.get(pid).label_config
    buckets = bucket_names(config)

    # Label Studio's own Data Manager action: it calls /setup, then /predict with the tasks, and stores each answer.
    sdk.actions.create(id="retrieve_tasks_predictions", project=pid, selected_items={"all": True, "excluded": []})
    predictions = {p.task: p for p in sdk.predictions.list(project=pid)}
    assert sorted(predictions) == sorted(t["id"] for t in pushed)
    interface = LabelInterface(config)
    for task in pushed:
        got = predictions[task["id"]]
        assert got.model_version == JUDGE and 0 <= got.score <= 1
        assert got.result == prediction_result(template, candidates(task, AI[template][0]), task["shown"], buckets)
        assert (
            interface.validate_prediction(
                {"result": got.result, "score": got.score, "model_version": got.model_version}, return_errors=True
            )
            == []
        )
    # Asked again, Label Studio finds every task holds this version's prediction and stores nothing more.
    sdk.actions.create(id="retrieve_tasks_predictions", project=pid, selected_items={"all": True, "excluded": []})
    assert len(sdk.predictions.list(project=pid)) == len(pushed)

    # Annotations made through Label Studio's API reach the store by webhook alone: the server's one sync ran at its
    # start, before any existed (--sync-every is off).
    wait_until(lambda: httpx.get(f"{server.url}/health", timeout=5).json()["sync"]["runs"] >= 1)
    person = ls_env.signup(email("annotator", pid))
    first, edit = HUMAN[template]
    made = {}
    for task in pushed:
        result = prediction_result(template, candidates(task, first), task["shown"], buckets)
        made[task["id"]] = sdk.annotations.create(task["id"], completed_by=person, result=result).id

    def store_says(expected: dict[int, list[tuple[int, str, list]]]) -> bool:
        got: dict[int, list] = {}
        for r in human_rankings(database_url):
            got.setdefault(r["annotation"], []).append((r["version"], r["status"], r["tiers"]))
        return got == expected

    expected = {made[t["id"]]: [(1, "valid", candidates(t, first))] for t in pushed}
    wait_until(lambda: store_says(expected), DELIVERED_WITHIN)

    edited, removed = pushed[0], pushed[1]
    sdk.annotations.update(
        made[edited["id"]], result=prediction_result(template, candidates(edited, edit), edited["shown"], buckets)
    )
    sdk.annotations.delete(made[removed["id"]])
    expected[made[edited["id"]]] = [
        (1, "superseded", candidates(edited, first)),
        (2, "valid", candidates(edited, edit)),
    ]
    expected[made[removed["id"]]] = [(1, "deleted", candidates(removed, first))]
    wait_until(lambda: store_says(expected), DELIVERED_WITHIN)
    # One raw record per delivery (each created, the edit, the deletion), each parsed.
    assert deliveries(database_url) == {"ok": len(pushed) + 2}
    assert {r["annotator"] for r in human_rankings(database_url)} == {
        next(e for e, (uid, _) in ls_env.users.items() if uid == person)
    }

    health = httpx.get(f"{server.url}/health", timeout=5).json()
    assert (health["sync"]["runs"], health["sync"]["changed"]) == (1, 0)  # the store owes nothing to a sync
    assert health["model_version"] == JUDGE and health["deliveries"]["pending"] == 0
    assert health["deliveries"]["last_delivery_at"] is not None


@pytest.mark.slow
@pytest.mark.usefixtures("embedded_model_cache")
def test_retrieve_predictions_with_nothing_trained_stores_the_default_judges_prediction_on_every_task(
    ls_env, serve, tmp_path
):
    database_url = f"sqlite:///{tmp_path / 'preflab.db'}"
    run = make_cli(database_url)
    import_hh(database_url, hh_rows(3), tmp_path)  # people's rankings only: no reward model, no AI judge
    pid = json.loads(run("ls", "init", "--template", "ranking", "--title", unique("nothing trained"), "--json").stdout)[
        "project_id"
    ]
    run("ls", "push", "--project", pid)
    server = serve(database_url, judge=None)
    wait_until(lambda: httpx.get(f"{server.url}/health", timeout=5).json()["predictions"]["loaded"], 300)
    out = json.loads(run("ls", "connect", server.url, "--project", pid, "--json").stdout)
    assert out["ml_backend"]["model_version"] == DEFAULT_SERVED

    # The Data Manager's "Retrieve predictions", as the browser's button calls it.
    sdk = ls_env.sdk()
    sdk.actions.create(id="retrieve_tasks_predictions", project=pid, selected_items={"all": True, "excluded": []})
    predictions = sdk.predictions.list(project=pid)
    assert sorted(p.task for p in predictions) == sorted(t["id"] for t in tasks(database_url))
    interface = LabelInterface(sdk.projects.get(pid).label_config)
    for got in predictions:
        prediction = {"result": got.result, "score": got.score, "model_version": got.model_version}
        assert got.model_version == DEFAULT_SERVED and 0 <= got.score <= 1 and got.result
        assert interface.validate_prediction(prediction, return_errors=True) == []


def test_kill_9_while_annotations_are_made_then_restart_leaves_the_store_exact(ls_env, serve, any_db, tmp_path):
    template = "ranking"
    pid, server, pushed = connected_project(any_db, template, tmp_path, serve)
    sdk = ls_env.sdk()
    buckets = bucket_names(sdk.projects.get(pid).label_config)
    people = [ls_env.signup(email(f"person{n}", pid)) for n in range(2)]
    first, edit = HUMAN[template]
    final: dict[int, list[list[int]]] = {}  # annotation id -> the tiers it ends with in Label Studio

    def annotate(task: dict, person: int, tiers) -> None:
        result = prediction_result(template, candidates(task, tiers), task["shown"], buckets)
        final[sdk.annotations.create(task["id"], completed_by=person, result=result).id] = candidates(task, tiers)

    def change(annotation: int, task: dict, tiers) -> None:
        sdk.annotations.update(
            annotation, result=prediction_result(template, candidates(task, tiers), task["shown"], buckets)
        )
        final[annotation] = candidates(task, tiers)

    killed, failures = threading.Event(), []

    def annotating() -> None:  # annotators at work: each submit posts its webhook, whether the server lives or not
        try:
            for task in pushed:
                annotate(task, people[0], first)
            killed.wait(60)  # the server is dead by the fourth submit at the latest, so it misses some for sure
            annotate(pushed[0], people[1], edit)
            change(min(final), pushed[0], edit)
            annotate(pushed[1], people[1], edit)
        except Exception as exc:
            failures.append(exc)

    worker = threading.Thread(target=annotating)
    worker.start()
    wait_until(lambda: sum(deliveries(any_db).values()) >= 2, 60)
    server.kill()  # mid-stream: a submit may be in flight, a delivery stored and not parsed yet
    killed.set()
    worker.join(120)
    assert not worker.is_alive() and failures == []
    assert sum(deliveries(any_db).values()) < len(final) + 1  # Label Studio sent some to no one

    again = serve(any_db, port=server.port)  # the port Label Studio knows: parses what is pending, syncs once
    change(max(final), pushed[1], first)  # and a delivery after the restart, which the startup sync may also read
    annotate(pushed[2], people[1], edit)

    def exact() -> bool:
        rows = human_rankings(any_db)
        versions = {}
        for r in rows:
            versions.setdefault(r["annotation"], []).append((r["version"], r["status"], r["tiers"]))
        for history in versions.values():
            history.sort()
        return (
            set(versions) == set(final)
            and all([v for v, _, _ in h] == list(range(1, len(h) + 1)) for h in versions.values())
            and all([s for _, s, _ in h] == ["superseded"] * (len(h) - 1) + ["valid"] for h in versions.values())
            and all(h[-1][2] == final[aid] for aid, h in versions.items())
        )

    wait_until(exact, 30)
    again.stop()  # SIGTERM: the sync or parsing under way finishes, so nothing can arrive after the last look
    assert exact() and len([r for r in human_rankings(any_db) if r["status"] == "valid"]) == len(final)
    assert set(deliveries(any_db)) == {"ok"}  # none pending, none quarantined
