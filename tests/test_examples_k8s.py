"""`examples/k8s/judge-job.yaml`, on paper and run: there is no Kubernetes cluster here, so what is checked is what
the cluster would be given.

The YAML parses into an Indexed Job whose N (`completions`) is the N its pods pass to `--shard`; its pods run the
command `examples/slurm/judge.sbatch` runs (the Slurm test's, `tests/slurm/test_array.py`), with Kubernetes'
JOB_COMPLETION_INDEX for Slurm's task id; the store's URL and the key reach the pod from a Secret, into its
environment only. Then the pod's own command line is run here as Kubernetes would run it, once per index with
JOB_COMPLETION_INDEX set, against a Postgres store and the fault app: the store equals one unsharded run's.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.db.procs import run_here
from tests.fault_app import Faults, serve
from tests.labelling.test_shard_workers import judged

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "examples" / "k8s" / "judge-job.yaml"
SBATCH = ROOT / "examples" / "slurm" / "judge.sbatch"
SECRET_ONLY = ("PREFLAB_DATABASE_URL", "OPENAI_API_KEY")


def job() -> dict:
    return yaml.safe_load(JOB.read_text(encoding="utf-8"))


def container(spec: dict) -> dict:
    (one,) = spec["spec"]["template"]["spec"]["containers"]
    return one


def shell_line(spec: dict) -> str:
    """The pod's command: `sh -c LINE`, LINE as the shell reads it."""
    one = container(spec)
    assert one["command"] == ["/bin/sh", "-c"] and len(one["args"]) == 1
    return one["args"][0]


def preflab_words(line: str) -> list[str]:
    """The `preflab …` command of a shell line (after `exec`), split as the shell splits it (variables kept)."""
    words = shlex.split(line.replace("\\\n", " "))
    return words[words.index("preflab") :]


def test_the_job_is_indexed_and_its_n_is_the_shards_n():
    spec = job()
    assert spec["apiVersion"] == "batch/v1" and spec["kind"] == "Job"
    assert spec["spec"]["completionMode"] == "Indexed" and spec["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert spec["spec"]["backoffLimitPerIndex"] >= 1  # a dead pod's index runs again
    env = {e["name"]: e.get("value") for e in container(spec)["env"]}
    assert int(env["SHARDS"]) == spec["spec"]["completions"] == spec["spec"]["parallelism"]


def test_its_pods_run_the_command_the_slurm_array_runs():
    sbatch = SBATCH.read_text(encoding="utf-8")
    exec_line = sbatch[sbatch.index("exec preflab") :]
    slurm = preflab_words(exec_line)
    assert slurm[-1] == "$@"  # the sbatch passes its own arguments on; the Job has none to pass
    pod = preflab_words(shell_line(job()))
    shard = pod.index("--shard")
    assert pod[shard + 1] == "$JOB_COMPLETION_INDEX/$SHARDS"
    assert pod[:shard] + pod[shard + 2 :] == slurm[: slurm.index("--shard")] + slurm[slurm.index("--shard") + 2 : -1]
    assert slurm[slurm.index("--shard") + 1] == "$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT"


def test_the_store_and_the_key_come_from_a_secret_into_the_environment_only():
    spec = job()
    env = {e["name"]: e for e in container(spec)["env"]}
    for name in SECRET_ONLY:
        assert "value" not in env[name] and set(env[name]["valueFrom"]) == {"secretKeyRef"}, name
    line = shell_line(spec)
    assert not re.search(r"OPENAI_API_KEY|DATABASE_URL|--database-url|api.key", line, re.IGNORECASE)
    literal = json.dumps([e.get("value") for e in env.values()])
    assert not re.search(r"postgres|sk-|password", literal, re.IGNORECASE)


@pytest.mark.slow
@pytest.mark.postgres
def test_run_as_its_pods_run_it_the_store_equals_one_run(postgres_url, sqlite_url, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"prompt": f"Question {k}: which is best?", "responses": [f"Answer {r}." for r in range(3)]})
            + "\n"
            for k in range(9)
        ),
        encoding="utf-8",
    )
    url, _, stop = serve(Faults())
    try:
        for store in (sqlite_url, postgres_url):
            run_here(store, "import", "prompts", str(prompts))
        run_here(sqlite_url, "judge", "pairwise", "--engine", "openai", "--api-base", url, "--model", "fault-model")
        spec = job()
        env = {e["name"]: e["value"] for e in container(spec)["env"] if "value" in e}
        shards = 3
        for index in range(shards):  # as the Job's pods, one after another here
            pod_env = {
                **os.environ,
                **env,
                "SHARDS": str(shards),
                "JOB_COMPLETION_INDEX": str(index),
                "OPENAI_BASE_URL": url,
                "PREFLAB_MODEL": "fault-model",
                "PREFLAB_DATABASE_URL": postgres_url,  # from the Secret in the cluster
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            }
            done = subprocess.run(["/bin/sh", "-c", shell_line(spec)], env=pod_env, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr[-2000:]
        assert judged(postgres_url) == judged(sqlite_url) and len(judged(sqlite_url)) == 9
    finally:
        stop()
