"""A Slurm array, for real: `examples/slurm/*.sbatch` submitted to a one-node Slurm cluster on this machine.

The files a user copies are the files submitted (their `#SBATCH` lines overridden on the command line: the array's
size, the output files, the environment). Every task runs `preflab … --shard K/N` against one Postgres store and
the fault app (tests/fault_app.py) in this process, on loopback, as its OpenAI-compatible server. The store the
tasks leave is compared with what one unsharded run stores on a fresh SQLite file (content, not ids). There is no
accounting database: a task's end is read from `scontrol show job` (finished jobs are kept an hour: MinJobAge).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from preflab.db.models import Candidate
from preflab.db.store import content_hash
from preflab.labelling.selection import shard_of
from tests.db.procs import rows, run_here, scalar, wait_for
from tests.fault_app import Faults
from tests.labelling.ls_fixtures import reserved_port
from tests.labelling.test_shard_workers import candidates, counted, judged
from tests.lm.engines.conftest import fault_server  # noqa: F401  (fixture)
from tests.slurm import cluster

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
JUDGE = ROOT / "examples" / "slurm" / "judge.sbatch"
GENERATE = ROOT / "examples" / "slurm" / "generate.sbatch"
TASKS = 3
PROMPTS = [f"Question {k}: which answer is best?" for k in range(12)]
SAMPLES = ["-n", "2", "--batch-size", "2", "--max-new-tokens", "4"]  # a batch: one prompt's two samples
DONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL"}


@pytest.fixture(scope="session")
def slurm():
    """The cluster's environment for sbatch: the one `make slurm` left running, else one started for this session."""
    started = cluster.start()
    yield cluster.environment()
    if started:
        cluster.stop()


def write_prompts(path: Path, prompts: list[str]) -> Path:
    path.write_text(
        "".join(json.dumps({"prompt": p, "responses": [f"{p} Answer {r}." for r in range(3)]}) + "\n" for p in prompts),
        encoding="utf-8",
    )
    return path


@pytest.fixture
def stores(postgres_url, sqlite_url, tmp_path):
    """(one run's SQLite, the array's Postgres), each with PROMPTS imported."""
    path = write_prompts(tmp_path / "prompts.jsonl", PROMPTS)
    for url in (sqlite_url, postgres_url):
        run_here(url, "import", "prompts", str(path))
    return sqlite_url, postgres_url


def submit(slurm: dict, script: Path, out: Path, store: str, url: str, *args: str, tasks: int = TASKS) -> str:
    """sbatch the user's file as an array of `tasks`, each task's log in `out`; returns the array's job id."""
    out.mkdir(exist_ok=True)
    environment = {**slurm, "PATH": f"{Path(sys.executable).parent}:{slurm['PATH']}"}  # `preflab` of this venv
    submitted = subprocess.run(
        [
            *("sbatch", "--parsable", f"--array=0-{tasks - 1}", f"--output={out}/%a.out", f"--chdir={out}"),
            f"--export=ALL,PREFLAB_DATABASE_URL={store},OPENAI_BASE_URL={url},PREFLAB_MODEL=fault-model",
            str(script),
            *args,
        ],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return submitted.stdout.strip().split(";")[0]


def tasks_of(slurm: dict, job: str) -> dict[int, dict[str, str]]:
    """Array task id -> its fields in `scontrol show job` (JobState, ExitCode, Restarts, …); tasks not yet split
    off the array's pending record are left out."""
    shown = subprocess.run(
        ["scontrol", "--oneliner", "show", "job", job], env=slurm, capture_output=True, text=True, check=True
    )
    found = {}
    for line in shown.stdout.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if fields.get("ArrayTaskId", "").isdigit():
            found[int(fields["ArrayTaskId"])] = fields
    return found


def finished(slurm: dict, job: str, tasks: int = TASKS, timeout: float = 180) -> dict[int, dict[str, str]]:
    """Wait until every task of the array has ended; their fields."""
    wait_for(
        lambda: len(ended := tasks_of(slurm, job)) == tasks and all(t["JobState"] in DONE for t in ended.values()),
        timeout=timeout,
        what=f"the array {job} to end",
    )
    return tasks_of(slurm, job)


def ends(tasks: dict[int, dict[str, str]]) -> dict[int, tuple[str, str]]:
    """Task id -> (its state, its exit code and signal)."""
    return {k: (t["JobState"], t["ExitCode"]) for k, t in tasks.items()}


def completed(slurm: dict, job: str, out: Path) -> dict[int, dict[str, str]]:
    """Wait for the array; every task must have completed (else the assertion shows their logs)."""
    ended = finished(slurm, job)
    logs = "\n".join(f"--- task {k}\n{(out / f'{k}.out').read_text()}" for k in ended)
    assert ends(ended) == dict.fromkeys(range(TASKS), ("COMPLETED", "0:0")), logs
    return ended


def slurm_run(slurm: dict, *command: str) -> None:
    subprocess.run(command, env=slurm, capture_output=True, text=True, check=True)


def test_a_generate_then_judge_array_stores_what_one_run_stores(slurm, fault_server, stores, tmp_path):
    one_run, workers = stores
    url, _ = fault_server()
    on_server = ["--engine", "openai", "--api-base", url, "--model", "fault-model"]
    run_here(one_run, "generate", *on_server, *SAMPLES)
    run_here(one_run, "judge", "pairwise", *on_server)

    job = submit(slurm, GENERATE, tmp_path / "generate", workers, url, *SAMPLES)
    completed(slurm, job, tmp_path / "generate")
    assert candidates(workers) == candidates(one_run) and len(candidates(one_run)) == 2 * len(PROMPTS)
    job = submit(slurm, JUDGE, tmp_path / "judge", workers, url)
    completed(slurm, job, tmp_path / "judge")
    assert judged(workers) == judged(one_run) and len(judged(one_run)) == len(PROMPTS)


def by_shard(counter) -> dict[int, int]:
    """Shard -> the requests in `counter` (the fault app's bodies asked, or served) for its prompts."""
    counts: dict[int, int] = {}
    for body, n in dict(counter).items():  # a copy: the server's thread adds to it meanwhile
        prompt = next(p for p in PROMPTS if json.dumps(p)[1:-1] in body)
        k = shard_of(content_hash(prompt), TASKS)
        counts[k] = counts.get(k, 0) + n
    return counts


def mid_run(faults: Faults) -> int | None:
    """A shard that was answered and has an ask waiting for its answer now, if any."""
    served, asked = by_shard(faults.served), by_shard(faults.bodies)
    return next((k for k in sorted(served) if asked[k] > served[k]), None)


def task(slurm: dict, job: str, k: int) -> dict[str, str]:
    return tasks_of(slurm, job)[k]


def test_a_task_cancelled_mid_run_and_requeued_leaves_the_store_exact(slurm, fault_server, stores, tmp_path):
    one_run, workers = stores
    url, faults = fault_server()
    run_here(one_run, "judge", "pairwise", "--engine", "openai", "--api-base", url, "--model", "fault-model")
    reference = judged(one_run)
    faults.bodies.clear()
    faults.served.clear()
    answered = 12
    faults.hold_after = answered  # the first 12 asks are answered and stored; then every answer waits

    out = tmp_path / "judge"
    job = submit(slurm, JUDGE, out, workers, url)
    # The victim: a task with answers stored and an ask waiting at the server, mid-run whatever the machine's speed.
    wait_for(
        lambda: (
            faults.held
            and scalar(workers, "SELECT count(*) FROM engine_requests") == answered
            and mid_run(faults) is not None
        ),
        what="a task with answers stored and an ask held",
    )
    victim, served = mid_run(faults), by_shard(faults.served)
    assert task(slurm, job, victim)["JobState"] == "RUNNING"
    slurm_run(slurm, "scancel", f"{job}_{victim}")
    wait_for(lambda: task(slurm, job, victim)["JobState"] == "CANCELLED", what="the task to be cancelled")
    slurm_run(slurm, "scontrol", "requeue", f"{job}_{victim}")
    wait_for(
        lambda: (t := task(slurm, job, victim))["Restarts"] == "1" and t["JobState"] in ("PENDING", "RUNNING"),
        what="the task to be requeued",
    )
    faults.held = False

    ended = completed(slurm, job, out)
    assert ended[victim]["Restarts"] == "1"
    assert judged(workers) == reference
    log = (out / f"{victim}.out").read_text()  # both runs (--open-mode=append)
    assert "CANCELLED" in log and f"task {victim} of 3 on" in log and ", run 1" in log
    again = int(re.search(r"\(([\d,]+) answered from the store\)", log).group(1))
    assert again == served[victim]  # its answers stored before the cancel are read back, not asked again


def test_a_task_meeting_a_prompt_over_the_context_quarantines_it_and_the_array_completes(
    slurm, fault_server, postgres_url, tmp_path
):
    url, faults = fault_server(max_context=300)
    long = "Summarise this: " + "words " * 100
    prompts = [*PROMPTS[:5], long]
    run_here(postgres_url, "import", "prompts", str(write_prompts(tmp_path / "prompts.jsonl", prompts)))

    out = tmp_path / "generate"
    completed(slurm, submit(slurm, GENERATE, out, postgres_url, url, *SAMPLES), out)
    # Three imported responses each, two generated but for the prompt the server refused.
    assert counted(postgres_url, Candidate) == {p: 3 if p == long else 5 for p in prompts}
    assert "quarantined 1 prompt the server refused" in (out / f"{shard_of(content_hash(long), TASKS)}.out").read_text()
    quarantined = rows(postgres_url, "SELECT reason FROM engine_requests WHERE status = 'quarantined'")
    assert len(quarantined) == 2 and all("maximum context length is 300" in reason for (reason,) in quarantined)
    assert faults.asked["chat"] == 2 * len(prompts)  # each sample asked once: no task failed and ran again


def test_a_failed_task_says_which_shard_it_was(slurm, postgres_url, tmp_path):
    run_here(postgres_url, "import", "prompts", str(write_prompts(tmp_path / "prompts.jsonl", PROMPTS)))
    dead = reserved_port()  # bound, not listening: connections are refused
    url = f"http://127.0.0.1:{dead.getsockname()[1]}/v1"
    out = tmp_path / "judge"
    try:
        ended = finished(slurm, submit(slurm, JUDGE, out, postgres_url, url, "--max-retries", "0", tasks=2), tasks=2)
    finally:
        dead.close()
    assert ends(ended) == dict.fromkeys(range(2), ("FAILED", "1:0"))
    for k in range(2):
        errors = [line for line in (out / f"{k}.out").read_text().splitlines() if line.startswith("Error:")]
        assert errors == [
            f"Error: shard {k}/2: the server at {url} does not answer (Connection error. (ConnectError)): "
            "is it running there?"
        ]
