"""The retrain lease: one holder among many, across threads and processes; a crashed holder's lease expires."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from sqlalchemy import select

from preflab.db.locks import describe, hold, try_acquire
from preflab.db.models import ModelVersion, TrainingRun
from preflab.errors import LockHeld
from tests.training.retrain.retrain_fixtures import write_config

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

CRASHING_HOLDER = """
import os, sys
from preflab.db.engine import open_database, session_factory
from preflab.db.locks import try_acquire
lease = try_acquire(session_factory(open_database(sys.argv[1])), sys.argv[3], "crashed-process", ttl=float(sys.argv[2]))
assert lease is not None
os._exit(9)  # dies without releasing anything
"""


def test_exactly_one_of_many_contenders_takes_the_lease(sessions):
    contenders = 8
    barrier = threading.Barrier(contenders)
    winners = []

    def contend(i: int) -> None:
        barrier.wait()
        if try_acquire(sessions, "retrain", f"contender-{i}", ttl=60) is not None:
            winners.append(i)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(contenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1
    assert describe(sessions, "retrain")["holder"] == f"contender-{winners[0]}"
    with (
        pytest.raises(LockHeld, match=f"another run holds the retrain lock \\(contender-{winners[0]}, until"),
        hold(sessions, "retrain", ttl=60),
    ):
        pass
    # The holder may take its own lease again (a renewal); another may not.
    assert try_acquire(sessions, "retrain", f"contender-{winners[0]}", ttl=60) is not None
    assert try_acquire(sessions, "retrain", "late", ttl=60) is None


def crash_holding(db_url: str, name: str, ttl: float) -> None:
    """A process takes the lease `name` for `ttl` seconds and dies without releasing it."""
    crashed = subprocess.run(
        [sys.executable, "-c", CRASHING_HOLDER, db_url, str(ttl), name], capture_output=True, text=True
    )
    assert crashed.returncode == 9, crashed.stderr


def test_a_crashed_holders_lease_blocks_until_it_expires_and_a_live_one_is_renewed(db_url, sessions):
    crash_holding(db_url, "retrain", 3600)  # no scheduler's delay outlasts it
    info = describe(sessions, "retrain")
    assert info["holder"] == "crashed-process" and not info["expired"]
    with pytest.raises(LockHeld, match="crashed-process"), hold(sessions, "retrain", ttl=60):
        pass
    crash_holding(db_url, "nightly", 0.2)
    deadline = time.monotonic() + 60
    while not describe(sessions, "nightly")["expired"]:  # polled: no fixed sleep can outwait every scheduler
        assert time.monotonic() < deadline, "the crashed holder's lease never expired"
        time.sleep(0.05)
    with hold(sessions, "nightly", ttl=0.9) as lease:  # taken over from the crashed holder
        # Held past its TTL by the heartbeat alone: its expiry moves on twice (renewed, then renewed again).
        expiries = [lease.expires_at]
        while len(expiries) < 3:
            now = describe(sessions, "nightly")
            assert now["holder"] == lease.holder and time.monotonic() < deadline, "the heartbeat never renewed it"
            if now["expires_at"] > expiries[-1]:
                expiries.append(now["expires_at"])
            time.sleep(0.05)
    assert describe(sessions, "nightly") is None  # released on the way out


@pytest.mark.slow
def test_two_overlapping_retrain_processes_train_once(cli, sessions, db_url, tmp_path, sample_rankings):
    config = write_config(tmp_path / "retrain", reward=True, dpo=False)
    cli("import", "rankings", sample_rankings)
    command = [sys.executable, "-m", "preflab", "--database-url", db_url, "retrain", "--config", str(config), "--json"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # tiny models: one thread each is faster
    processes = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)
    ]
    results = [p.communicate(timeout=600) for p in processes]
    assert [p.returncode for p in processes] == [0, 0], [err[-2000:] for _, err in results]
    outcomes = sorted((json.loads(out) for out, _ in results), key=lambda r: r["status"])
    # The loser either found the lease taken, or (had it started after the winner finished) nothing new.
    assert [o["status"] for o in outcomes] in (["locked", "trained"], ["nothing-to-do", "trained"])
    if outcomes[0]["status"] == "locked":
        assert "another run holds the retrain lock" in outcomes[0]["message"]
    with sessions.begin() as session:
        runs = session.scalars(select(TrainingRun)).all()
        assert [(r.kind, r.status) for r in runs] == [("reward-grouped", "succeeded")]
        (version,) = session.scalars(select(ModelVersion).where(ModelVersion.kind == "reward")).all()
        assert version.is_current and version.name == outcomes[1]["runs"][0]["model_version"]
    assert describe(sessions, "retrain") is None


@pytest.mark.slow
def test_a_terminated_retrain_records_its_run_as_failed_and_gives_the_lease_back(sqlite_url, tmp_path, sample_rankings):
    """SIGTERM (a scheduler's timeout, systemd stopping, a Kubernetes eviction) is not a crash: the run
    is marked failed and the next run need not wait for the lease to expire."""
    from preflab.db.engine import open_database, session_factory
    from preflab.db.ingest.jsonl import import_file, import_rankings_batch

    sessions = session_factory(open_database(sqlite_url))
    import_file(sessions, sample_rankings, import_rankings_batch)
    config = write_config(tmp_path / "retrain", reward=True, dpo=False, max_steps=100_000)
    command = [sys.executable, "-m", "preflab", "--database-url", sqlite_url, "retrain", "--config", str(config)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    deadline = time.monotonic() + 300
    while not list((tmp_path / "retrain" / "runs").glob("*/reward/data/dataset_dict.json")):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.2)
    # The run is recorded and its data copied: from here on, whenever the signal lands (loading the model, a
    # training step), the run must end failed and the lease be free. No sleep guesses when training begins.
    assert describe(sessions, "retrain") is not None
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, err[-2000:]
    with sessions.begin() as session:
        (run,) = session.scalars(select(TrainingRun)).all()
        assert run.status == "failed" and run.error.startswith("SystemExit")
        assert session.scalar(select(ModelVersion).where(ModelVersion.kind == "reward")) is None
    assert describe(sessions, "retrain") is None
