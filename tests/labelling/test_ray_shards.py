"""Many workers on Ray: examples/ray/judge.py runs `preflab judge pairwise --shard K/3` as three Ray tasks.

A Ray head node runs on this machine (`ray start --head`, 3 CPUs, a 100 MB object store, no dashboard) and the
driver runs the three shards against the fault app (tests/fault_app.py) on a Postgres store. The app holds every
answer after its 12th, so each shard that has begun waits mid-run; once all that was answered is stored, the Ray
worker of the shard that stored most is killed with SIGKILL (found as the parent of its `preflab judge` process).
Ray runs that shard again, its new run reads back the answers the killed one stored, and the store ends as one
unsharded run leaves it (compared by content with a run on SQLite, as tests/labelling/test_shard_workers.py
does). No answer the store holds was paid for twice: only the asks the killed worker had in flight, answered into
a closed connection, were answered again.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from sqlalchemy import select

from preflab.db.engine import make_engine
from preflab.db.models import Annotator
from preflab.db.requests import EngineRequest
from preflab.db.store import content_hash
from preflab.labelling.selection import shard_of
from tests.conftest import SECRETS
from tests.db.procs import run_here, wait_for
from tests.fault_app import free_port
from tests.labelling.test_shard_workers import judged
from tests.lm.engines.conftest import fault_server, no_outside_server  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "examples" / "ray" / "judge.py"
SHARDS = 3
PROMPTS = [f"Question {k}: which answer is best?" for k in range(24)]
SLICES = [shard_of(content_hash(p), SHARDS) for p in PROMPTS]
ASKS_PER_PROMPT = 6  # three replies: three pairs, each asked in both orders
HOLD_AFTER = 12  # answers the fault app gives before it holds them all: fewer than any shard asks
CONCURRENCY = 4  # asks a shard has in flight at most


class RayHead(NamedTuple):
    address: str
    session: int  # the session id of its processes: its workers, and what they start


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory) -> Iterator[RayHead]:
    """A Ray head node on this machine, on free ports. `ray start --block` runs in a session of its own, and at
    the end it is stopped and whatever is left of that session killed (not `ray stop`, which would stop every Ray
    node on the machine)."""
    ray = Path(sys.executable).with_name("ray")
    if not ray.exists():
        pytest.fail(f"{ray} is missing: install the ray extra (pip install -e '.[ray]'; make test-setup does)")
    temp = Path(tempfile.mkdtemp(prefix="ray-"))  # short: Ray's socket paths there must fit in 107 characters
    # The workers' environment: none of the developer's credentials or servers, a preflab home of their own.
    env = {k: v for k, v in os.environ.items() if k not in SECRETS and not k.startswith(("OPENAI_", "PREFLAB_"))}
    env |= {"PREFLAB_HOME": str(tmp_path_factory.mktemp("ray-home")), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    port = free_port()
    command = [
        *(str(ray), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1"),
        *("--num-cpus=3", "--object-store-memory=100000000", "--include-dashboard=false", "--disable-usage-stats"),
        f"--dashboard-agent-listen-port={free_port()}",  # minimal Ray starts no client server (ray[client])
        *("--min-worker-port=0", "--max-worker-port=0", f"--temp-dir={temp}"),
    ]
    log = temp / "head.log"
    with log.open("w") as out:
        head = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:

        def started() -> bool:
            assert head.poll() is None, log.read_text()
            return "Ray runtime started" in log.read_text()

        wait_for(started, timeout=120, what="the Ray head node to start")
        yield RayHead(f"127.0.0.1:{port}", head.pid)
    finally:
        head.terminate()  # `--block` stops the node's processes on SIGTERM
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
        for pid in in_session(head.pid):  # a worker left behind
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


def stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent, session) of a process, from /proc/PID/stat; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1]), int(fields[3])


def alive(pid: int) -> bool:
    found = stat(pid)
    return found is not None and found[0] != "Z"  # a zombie has ended


def in_session(sid: int) -> list[int]:
    """The live processes of session `sid`: those `ray start` started, and theirs."""
    found = []
    for pid in (int(p.name) for p in Path("/proc").glob("[0-9]*")):
        state = stat(pid)
        if state is not None and state[0] != "Z" and state[2] == sid:
            found.append(pid)
    return found


def shard_process(head: RayHead, k: int) -> tuple[int, int]:
    """(the pid of `preflab judge … --shard k/3` on this Ray node, the pid of its parent: the task's worker)."""
    for pid in in_session(head.session):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().rstrip("\0").split("\0")
        except OSError:  # ended meanwhile
            continue
        if args[1:5] == ["-m", "preflab", "judge", "pairwise"] and args[-2:] == ["--shard", f"{k}/{SHARDS}"]:
            return pid, stat(pid)[1]
    raise AssertionError(f"no process of the Ray node runs shard {k}")


def judge(url: str, *more: str) -> list[str]:
    return ["pairwise", "--engine", "openai", "--api-base", url, "--model", "fault-model", *more]


def stored_by_shard(url: str) -> list[int]:
    """How many answers the store holds for each shard's prompts."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            asked = [json.dumps(r, ensure_ascii=False) for r in conn.scalars(select(EngineRequest.request))]
    finally:
        engine.dispose()
    counts = [0] * SHARDS
    for body in asked:
        (k,) = {k for p, k in zip(PROMPTS, SLICES) if p in body}
        counts[k] += 1
    return counts


def engine_totals(url: str) -> dict:
    """What the judge's runs asked and paid, added up on its annotator."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return conn.scalars(select(Annotator.config).where(Annotator.kind == "ai")).one()["engine"]
    finally:
        engine.dispose()


def of_shard(body: str, k: int) -> bool:
    return any(p in body for p, s in zip(PROMPTS, SLICES) if s == k)


def test_ray_runs_a_killed_shard_again_and_the_store_is_what_one_run_stores(
    ray_head, postgres_url, sqlite_url, fault_server, tmp_path
):
    assert all(SLICES.count(k) * ASKS_PER_PROMPT > HOLD_AFTER for k in range(SHARDS))
    path = tmp_path / "prompts.jsonl"
    path.write_text(
        "".join(json.dumps({"prompt": p, "responses": [f"{p} Answer {r}." for r in range(3)]}) + "\n" for p in PROMPTS),
        encoding="utf-8",
    )
    for url in (sqlite_url, postgres_url):
        run_here(url, "import", "prompts", str(path))
    reference_server, _ = fault_server()
    assert run_here(sqlite_url, "judge", *judge(reference_server))["ranked"] == len(PROMPTS)

    server, faults = fault_server(hold_after=HOLD_AFTER)
    out, err = tmp_path / "driver.out", tmp_path / "driver.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        driver = subprocess.Popen(
            [
                *(sys.executable, str(DRIVER), "--address", ray_head.address, "--shards", str(SHARDS), "--"),
                *judge(server, "--concurrency", str(CONCURRENCY)),
            ],
            env={**os.environ, "PREFLAB_DATABASE_URL": postgres_url},
            stdout=stdout,
            stderr=stderr,
        )
    try:

        def all_waiting() -> bool:
            assert driver.poll() is None, err.read_text()
            answered = sum(faults.served.values())
            return faults.held and faults.holding == faults.in_flight and sum(stored_by_shard(postgres_url)) == answered

        # Every ask after the 12th waits, and every answer given is stored: the shards stand still, mid-run.
        wait_for(all_waiting, timeout=120, what="the shards to wait for their answers, all given ones stored")
        kept = stored_by_shard(postgres_url)
        victim = kept.index(max(kept))
        mine = ASKS_PER_PROMPT * SLICES.count(victim)
        assert 0 < kept[victim] < mine
        shard, worker = shard_process(ray_head, victim)
        assert Path(f"/proc/{worker}/cmdline").read_bytes().startswith(b"ray::judge_shard"), "not a Ray task's worker"
        os.kill(worker, signal.SIGKILL)
        wait_for(lambda: not alive(shard), timeout=30, what="the killed worker's judge to end with it")
        faults.held = False
        assert driver.wait(timeout=180) == 0, err.read_text()
    finally:
        faults.held = False
        if driver.poll() is None:
            driver.kill()

    lines = out.read_text().splitlines()
    for k in range(SHARDS):
        said = "\n".join(line for line in lines if line.startswith(f"shard {k}/{SHARDS}: "))
        asks = ASKS_PER_PROMPT * SLICES.count(k)
        assert re.search(rf"ranked {SLICES.count(k)} prompts", said), said
        # The shard run again reads back what its killed run stored, and asks only for the rest.
        hits = kept[victim] if k == victim else 0
        assert f"{asks - hits:,} requests ({hits:,} answered from the store)" in said, said
    assert lines[-1] == f"all {SHARDS} shards judged"

    assert judged(postgres_url) == judged(sqlite_url)
    assert sum(stored_by_shard(postgres_url)) == ASKS_PER_PROMPT * len(PROMPTS)
    # The runs that ended (the killed one never did) paid for every ask once, the rest read from the store.
    paid = engine_totals(postgres_url)
    assert (paid["runs"], paid["requests"], paid["cache_hits"]) == (
        SHARDS,
        len(PROMPTS) * ASKS_PER_PROMPT - kept[victim],
        kept[victim],
    )
    # No answer paid for twice, but the asks the killed worker had in flight: answered into a closed connection.
    twice = [body for body, n in faults.served.items() if n > 1]
    assert all(of_shard(body, victim) for body in twice) and len(twice) <= CONCURRENCY
    assert max(faults.served.values()) <= 2
    assert sum(faults.served.values()) == ASKS_PER_PROMPT * len(PROMPTS) + len(twice)


def test_the_driver_names_the_shards_whose_command_failed(ray_head):
    done = subprocess.run(
        [sys.executable, str(DRIVER), "--address", ray_head.address, "--shards", "2", "--", "pairwise", "--bad"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 1, done.stderr
    assert "2 of 2 shards failed: 0/2, 1/2." in done.stderr
    assert "shard 1/2: failed (exit status 2;" in done.stdout  # click's status for a wrong option, not retried
