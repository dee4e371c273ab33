"""Several servers behind one run (`--api-base A,B`): one that dies mid-run is left out, the others finish.

Server A is the fault app in a process of its own, answering nothing within the run (a minute a reply), so
the run's first request, which goes to A (both servers have none in flight), is still waiting on A when A is
killed with SIGKILL: the kill lands mid-run on every machine. Server B, in this process, answers at once.
With B alive the run goes on, asks B what it had asked A, stores every answer once and says that A stopped
answering. A run started while A is still down goes on with B from the start. With A alone, the same death stops the
run with one sentence, as a server that never answered does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from preflab.db.models import Candidate
from preflab.db.requests import EngineRequest
from preflab.errors import EngineError
from preflab.lm.engines import Generate
from tests.fault_app import free_port
from tests.lm.engines.conftest import engine_for, fault_server, no_outside_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slow  # a server in a process of its own: a second or more a test

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = [f"Question {i}: which way is north?" for i in range(10)]


@pytest.fixture
def dying_server():
    """(URL, kill): the fault app in a process of its own that holds every reply for a minute."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fault_app.py"), str(port), "60"], cwd=ROOT)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"{url}/models", timeout=1).raise_for_status()
            break
        except httpx.HTTPError:
            assert proc.poll() is None and time.monotonic() < deadline, "the fault app did not start"
            time.sleep(0.05)

    def kill() -> None:
        proc.kill()
        proc.wait(10)

    yield url, kill
    kill()


def kill_when(condition, kill, timeout: float = 60) -> threading.Thread:
    """A thread that kills the server once `condition()` holds (checked every 20 ms)."""

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.02)
        kill()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_server_that_dies_mid_run_is_left_out_and_the_other_finishes_the_run(
    cli, sessions, fault_server, dying_server, tmp_path, caplog
):
    dead, kill = dying_server
    alive, faults = fault_server()
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS), encoding="utf-8")
    asks = 2 * len(PROMPTS)
    # The first ask waits on A from the start; once B has answered five, A is killed with it in flight.
    watcher = kill_when(lambda: faults.asked["chat"] >= 5, kill)
    ran = cli(
        *["generate", "--engine", "openai", "--api-base", f"{dead},{alive}", "--model", "fault-model"],
        *["--prompts", prompts, "-n", 2, "--concurrency", 2, "--max-retries", 1, "--json"],
    )
    watcher.join()
    out = json.loads(ran.stdout)
    assert out["stored"] == asks and out["failed"] == 0
    assert out["engine"]["servers_lost"] == [dead] and out["engine"]["requests"] == asks
    # said as it happens (a warning: on stderr where nothing else handles the logs), and in the summary
    assert f"the server at {dead} stopped answering" in caplog.text and f"going on with {alive}" in caplog.text
    assert faults.asked["chat"] == asks  # B answered every ask, A's one asked again of it, nothing twice
    assert max(faults.served.values()) == 1
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(Candidate)) == asks
        assert session.scalar(select(func.count()).select_from(EngineRequest)) == asks

    # A run started with A still down goes on with B from its first request, and says so.
    caplog.clear()
    more = cli(*["generate", "--engine", "openai", "--api-base", f"{dead},{alive}", "--model", "fault-model"], "-n", 3)
    assert f"the server at {dead} stopped answering" in caplog.text
    assert f"1 server stopped answering and the others went on: {dead}" in more.stdout
    assert faults.asked["chat"] == asks + len(PROMPTS)


def test_the_last_server_dying_mid_run_stops_it_with_one_sentence(engine_for, dying_server):
    dead, kill = dying_server
    engine = engine_for(dead, max_retries=1, concurrency=2)
    # The route's count of requests in flight is the one sign in this process that the ask reached A.
    watcher = kill_when(lambda: engine._routes.all[0].in_flight > 0, kill)
    with pytest.raises(EngineError) as stopped:
        engine.generate([Generate(prompt=p) for p in PROMPTS])
    watcher.join()
    assert str(stopped.value).startswith(f"the server at {dead} does not answer")
    assert engine.stats.servers_lost == []
