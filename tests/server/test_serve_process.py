"""`preflab serve` as a real process on a loopback port: refusals before binding, kill -9 and restart."""

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
from click.testing import CliRunner
from sqlalchemy import func, select

from preflab.cli import cli as root
from preflab.db.models import Ranking, RawRecord
from tests.labelling.ls_helpers import session
from tests.server.conftest import SECRET, unknown_to_label_studio
from tests.server.deliveries import annotated, known_project


@pytest.fixture(autouse=True)
def small_default_model(isolated_env, monkeypatch, tiny_lm):
    """PREFLAB_MODEL, for the servers started here: nothing is trained, so its likelihood judge loads at start."""
    monkeypatch.setenv("PREFLAB_MODEL", tiny_lm)


def test_a_non_loopback_address_without_a_secret_is_refused(sqlite_url, nowhere):
    result = CliRunner().invoke(root, ["--database-url", sqlite_url, "serve", "--host", "0.0.0.0"])
    assert result.exit_code == 1
    assert result.output == (
        "Error: refusing to listen on 0.0.0.0 without a secret: set PREFLAB_WEBHOOK_SECRET (or bind 127.0.0.1)\n"
    )


@pytest.mark.parametrize(
    "args,said",
    [
        (["--sync-every", "soon"], "--sync-every must be a duration"),
        (["--predict-budget", "soon"], "--predict-budget must be a duration"),
        (["--retrain-every", "5"], "no retrain config"),
        (["--judge", "nobody"], "no judge 'nobody'"),
    ],
)
def test_options_are_checked_before_binding(sqlite_url, nowhere, args, said):
    result = CliRunner().invoke(root, ["--database-url", sqlite_url, "serve", *args])
    assert result.exit_code != 0 and said in result.output and len(result.output.splitlines()) == 1


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(url: str, port: int, log: Path) -> subprocess.Popen:
    """The server, its log appended to a file (a pipe nobody reads could fill and stall it)."""
    env = {**os.environ, "PREFLAB_WEBHOOK_SECRET": SECRET}
    with log.open("a") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "preflab",
                "--database-url",
                url,
                "serve",
                "--port",
                str(port),
                "--sync-every",
                "off",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def _wait_healthy(proc: subprocess.Popen, base: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "preflab serve exited"
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("preflab serve did not answer /health")


def _store(url: str) -> dict:
    from preflab.labelling.studio.webhooks import WEBHOOK_SOURCE

    deliveries = select(func.count()).select_from(RawRecord).where(RawRecord.source == WEBHOOK_SOURCE)
    with session(url) as s:
        return {
            "raw": s.scalar(deliveries),
            "pending": s.scalar(deliveries.where(RawRecord.status == "pending")),
            "rankings": sorted(
                s.execute(
                    select(Ranking.ls_annotation_id, Ranking.version, Ranking.status).order_by(
                        Ranking.ls_annotation_id, Ranking.version
                    )
                ).all()
            ),
        }


def test_kill_9_while_deliveries_arrive_then_restart_leaves_the_store_exact(db_url, ls_env, tmp_path):
    project = known_project(db_url, ls_env.url, unknown_to_label_studio())
    bodies = [annotated(project, task, user, annotation=100 * task + user) for task in range(1, 16) for user in (1, 2)]
    headers = {"X-Preflab-Secret": SECRET}
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    proc = _start(db_url, port, log)
    _wait_healthy(proc, base)
    acknowledged, lock = [], threading.Lock()

    def post(batch):
        with httpx.Client(timeout=5) as client:
            for body in batch:
                try:
                    if client.post(f"{base}/webhook", content=body, headers=headers).status_code == 200:
                        with lock:
                            acknowledged.append(body)
                except httpx.HTTPError:  # the server died under us, as Label Studio would see it
                    return

    senders = [threading.Thread(target=post, args=(bodies[i::3],)) for i in range(3)]
    for sender in senders:
        sender.start()
    deadline = time.monotonic() + 30
    while len(acknowledged) < 10 and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.kill()  # SIGKILL: no shutdown, no flush, mid-request
    proc.wait()
    for sender in senders:
        sender.join()
    assert 10 <= len(acknowledged) < len(bodies)
    # What was acknowledged is stored, whether or not it was parsed yet.
    assert _store(db_url)["raw"] >= len(acknowledged)

    first_run = len(log.read_text())
    proc = _start(
        db_url, port, log
    )  # parses what was left pending; the rest is sent again, as `ls sync` would fetch it
    _wait_healthy(proc, base)
    with httpx.Client(timeout=10) as client:
        for body in bodies:  # every delivery, the acknowledged ones replayed
            assert client.post(f"{base}/webhook", content=body, headers=headers).status_code == 200
    deadline = time.monotonic() + 30
    while _store(db_url)["pending"] and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)  # graceful: requests in flight and the workers' steps finish
    proc.wait(timeout=60)
    err = log.read_text()[first_run:]
    # uvicorn shuts down, then ends by the signal it caught (as systemd and Kubernetes expect).
    assert proc.returncode in (0, -signal.SIGTERM) and "workers stopped" in err, err

    final = _store(db_url)
    assert final["raw"] == len(bodies) and final["pending"] == 0
    assert final["rankings"] == [(100 * task + user, 1, "valid") for task in range(1, 16) for user in (1, 2)]
    lines = [json.loads(line.split(": ", 1)[1]) for line in err.splitlines() if "preflab.server.access" in line]
    assert sum(1 for line in lines if line["path"] == "/webhook") == len(bodies)
    assert SECRET not in err and "reply" not in err  # no secret, no annotation text
