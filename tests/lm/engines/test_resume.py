"""A run killed with `kill -9` keeps what was committed, and its re-run asks only for what is missing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from preflab.db.requests import EngineRequest
from preflab.lm.engines import Generate, Generation, Sampling

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

ROOT = Path(__file__).resolve().parents[3]
ASKS = 60


def batch() -> list[Generate]:
    return [Generate(f"Question number {i}: why?", Sampling(16, 0.7, 0.9, 11)) for i in range(ASKS)]


def child(database_url: str, url: str) -> None:
    """The run that is killed: asks everything, four at a time, committing answers every 0.2 s."""
    from preflab.db.engine import open_database, session_factory
    from preflab.lm.engines import EngineConfig
    from preflab.lm.engines.remote import OpenAIEngine

    sessions = session_factory(open_database(database_url))
    config = EngineConfig(engine="openai", api_base=url, model="fault-model", concurrency=4)
    OpenAIEngine(config, sessions, commit_every=0.2).generate(batch())


def count(sessions) -> int:
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(EngineRequest))


def test_a_killed_run_is_resumed_asking_only_for_what_is_missing(fault_server, engine_for, sessions, db_url):
    # After 20 answers no answer leaves the server. Once every request in flight waits there, the run has been
    # answered all it will be, and must commit each of those answers while it runs (polled against a deadline).
    url, faults = fault_server(delay=0.1, hold_after=20)
    code = f"from tests.lm.engines.test_resume import child; child({db_url!r}, {url!r})"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 60
    while not faults.held or faults.holding < faults.in_flight or count(sessions) < sum(faults.served.values()):
        assert proc.poll() is None and time.monotonic() < deadline, "answers given were not committed"
        time.sleep(0.05)
    answered = sum(faults.served.values())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept, asked_before = count(sessions), faults.asked["chat"]
    assert kept == answered == 20
    faults.held = False  # the answers held go to a run that is gone
    assert asked_before - kept <= 4  # lost: only the requests in flight (concurrency 4), never an answer received

    engine = engine_for(url)
    results = engine.generate(batch())
    assert all(isinstance(r, Generation) for r in results)
    assert faults.asked["chat"] - asked_before == ASKS - kept == engine.stats.requests
    assert engine.stats.cache_hits == kept
    assert count(sessions) == ASKS
