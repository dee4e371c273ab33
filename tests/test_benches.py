"""Every bench runs at a size that takes seconds and prints its JSON: a bench that cannot start can no longer hide.

`bench_store.py --database both` stopped at its first Postgres run for a release
(an import moved, and the bulk timers went in after the store had bound the untimed
functions), and nothing noticed: the benches ran only by hand. Here each runs as a
user runs it, `python bench/bench_NAME.py` with small options, on both databases
where it takes `--database`, in a temporary folder (TMPDIR), and must exit 0 with a
JSON document on stdout. The figures are not checked (bench/README.md's are measured
at full size, by hand); that the script gets to the end is.

The benches are processes that mostly wait on their own children (a fresh process
per side, a server, Postgres), so the module starts them two at a time, once, when
the first of them is asked for; each test then reads its own. The vLLM bench uses the
session's vLLM server (tests/vllm_server.py) with `--api-base`; the model benches load
a tiny random model from tests/tiny_models.py; `bench_dpo_gpu.py` takes a dry run
where there is no CUDA.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import POSTGRES_URL

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 300  # a bench that hangs fails instead of holding the suite
WORKERS = 2
TINY_MODEL = "{tiny}"  # replaced by the tiny causal LM's folder

# Each bench's small size (its options, split at spaces). The longest first, so two at a time finish together.
BENCHES: dict[str, str] = {
    "bench_serve": "--deliveries 40 --clients 4 --database both",
    "bench_dpo_first_step": "--pairs 8 --steps 1 --batch 2",
    "bench_reward_grouped": "--k 4 --prompts 10 --epochs 0.5 --prompts-per-step 4",
    "bench_reward_eval": "--pairs 40 --baseline-pairs 20 --rounds 20 --workdir {tmp}/reward-eval",
    "bench_dpo_gpu": "--dry-run",
    "bench_rl": "--steps 1 --warmup 1 --prompts 2 --n 2 --completion 4",
    "bench_pair_ranker": "--seeds 0 --epochs 0.5 --toy-prompts 20 --toy-candidates 2 --toy-base-steps 2"
    " --sum-prompts 20",
    "bench_judges": f"--model {TINY_MODEL} --pairs 1 --batch-size 2 --max-new-tokens 2 --score-prompts 1 --samples 1"
    " --judge-max-new-tokens 8",
    "bench_report": "--rankings 300 --store {tmp}/report.db",
    "bench_generate": f"--model {TINY_MODEL} --prompts 2 --batch-size 2 --max-new-tokens 4",
    "bench_active": "--seeds 0 --batch 5 --rounds 2 --pool 60 --held-out 40 --plot {tmp}/active.png",
    "bench_import_datasets": "--rows 100 --messages 110 --response-chars 50 --database both",
    "bench_ls_sync": "--tasks 50 --baseline-tasks 10 --database both",
    "bench_store": "--rankings 200 --baseline-rankings 20 --more 20 --database both",
    "bench_leaderboard": "--battles 2000 --models 5 --rounds 10 --fastchat-rounds 2",
    "bench_engine_client": "--concurrency 8 --requests 40 --latency 0.05 --baseline-requests 4 --database postgres",
    "bench_store_floor": "--rankings 200",
    "bench_bon": "--samples 200 --replicates 10",
}
# bench_engine_vllm.py's, beside the session's server: one prompt and one pair each way.
VLLM_SIZE = "--prompts 1 --candidates 1 --max-new-tokens 4 --pairs 1 --judge-candidates 2 --concurrency 4"
# These load or train transformer models (tiny ones).
MODELS = {
    "bench_dpo_first_step",
    "bench_reward_grouped",
    "bench_reward_eval",
    "bench_dpo_gpu",
    "bench_rl",
    "bench_pair_ranker",
    "bench_judges",
    "bench_generate",
    "bench_engine_vllm",
}


def last_json(stdout: str) -> dict | None:
    """The last JSON object printed on a line of its own (one line, or indented over several)."""
    lines = stdout.splitlines()
    decoder = json.JSONDecoder()
    for start in reversed([i for i, line in enumerate(lines) if line.startswith("{")]):
        try:
            found, _ = decoder.raw_decode("\n".join(lines[start:]))
        except json.JSONDecodeError:
            continue
        if isinstance(found, dict):
            return found
    return None


def run_bench(name: str, args: list[str], workdir: Path) -> dict:
    """Run one bench as a user would; returns its exit code, outputs, JSON and wall seconds."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "TMPDIR": str(workdir),
        "MPLBACKEND": "Agg",
        "PREFLAB_BENCH_POSTGRES_URL": POSTGRES_URL,
        "PYTHONUNBUFFERED": "1",
    }
    began = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, str(ROOT / "bench" / f"{name}.py"), *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as stopped:
        code, out, err = "timeout", str(stopped.stdout or ""), str(stopped.stderr or "")
    return {"code": code, "stdout": out, "stderr": err, "json": last_json(out), "seconds": time.monotonic() - began}


def _selected(request) -> list[str]:
    """The benches whose tests this session runs (all of them under `make test`)."""
    wanted = {
        item.callspec.params["name"]
        for item in request.session.items
        if item.module is sys.modules[__name__] and hasattr(item, "callspec") and "name" in item.callspec.params
    }
    return [name for name in BENCHES if name in wanted]


class Runs:
    """Benches started two at a time, each in a folder of its own under `base`."""

    def __init__(self, base: Path, tiny: Path):
        self.base, self.tiny = base, tiny
        self.pool = ThreadPoolExecutor(max_workers=WORKERS)
        self.futures: dict[str, Future] = {}

    def start(self, name: str) -> None:
        if name not in self.futures:
            workdir = self.base / name
            args = BENCHES[name].replace("{tmp}", str(workdir)).replace(TINY_MODEL, str(self.tiny)).split()
            self.futures[name] = self.pool.submit(run_bench, name, args, workdir)

    def result(self, name: str) -> dict:
        self.start(name)
        return self.futures[name].result()


@pytest.fixture(scope="module")
def bench_runs(request, tmp_path_factory) -> Runs:
    """Every bench this session's tests ask for, started at once (two at a time), the longest first."""
    from tests.tiny_models import tiny_causal_lm

    base = tmp_path_factory.mktemp("benches")
    runs = Runs(base, tiny_causal_lm(base / "tiny-model"))
    for name in _selected(request):
        runs.start(name)
    yield runs
    runs.pool.shutdown(wait=True, cancel_futures=True)


def check(name: str, result: dict) -> dict:
    tail = f"{name} exited {result['code']} after {result['seconds']:.0f} s:\n{result['stderr'][-3000:]}"
    assert result["code"] == 0, tail
    assert result["json"], f"{name} printed no JSON document:\n{result['stdout'][-2000:]}"
    return result["json"]


@pytest.mark.parametrize(
    "name", [pytest.param(name, marks=[pytest.mark.slow] if name in MODELS else []) for name in BENCHES]
)
def test_the_bench_completes_and_prints_its_json(name, bench_runs):
    report = check(name, bench_runs.result(name))
    if name == "bench_dpo_gpu" and report.get("dry_run"):  # no CUDA here: said so, nothing measured
        assert report["measured"] is False and set(report["settings"]) == {"trl-default", "preflab"}


def test_bench_store_runs_on_postgres_too(bench_runs):
    """The run that stopped with time_bulk_calls' AssertionError: both databases are in its JSON."""
    report = check("bench_store", bench_runs.result("bench_store"))
    assert {"peer", "sqlite", "postgres"} <= set(report)
    assert report["postgres"]["core"][0]["import"]["rankings"] == 200


@pytest.mark.slow
def test_the_vllm_bench_completes_on_the_sessions_server(vllm_server, tmp_path):
    """Served generation and pairwise judging against the in-process engine, on the session's vLLM server."""
    args = ["--api-base", vllm_server.url, "--served-model", vllm_server.model, "--model", str(vllm_server.model_dir)]
    args += VLLM_SIZE.split()
    report = check("bench_engine_vllm", run_bench("bench_engine_vllm", args, tmp_path))
    assert set(report["ratios"]) == {"generate", "judge pairwise"}


@pytest.mark.slow
def test_the_two_server_bench_completes_on_the_sessions_server(vllm_server, tmp_path):
    """One server against two, the session's server standing in for both (the bench binds and kills only its own)."""
    args = ["--servers", f"{vllm_server.url},{vllm_server.url}", "--served-model", vllm_server.model]
    args += ["--prompts", "2", "--candidates", "1", "--max-new-tokens", "4", "--concurrency", "2"]
    report = check("bench_engine_servers", run_bench("bench_engine_servers", args, tmp_path))
    assert report["one"] > 0 and report["two"] > 0 and report["killed"] is None


@pytest.mark.slow
def test_the_gpu_run_dry_runs_on_the_cpu(vllm_server, tmp_path):
    """bench/gpu/run.sh, the script a lent GPU runs, at a tiny size on the CPU: both parts, one JSON line."""
    args = ["--dry-run", "--api-base", vllm_server.url, "--served-model", vllm_server.model]
    args += ["--model", str(vllm_server.model_dir)]
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHON": sys.executable}
    done = subprocess.run(
        [str(ROOT / "bench" / "gpu" / "run.sh"), *args], env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = done.stdout.splitlines()
    report = json.loads(line)
    assert report["device"] == "cpu" and report["dry_run"] is True
    assert (
        report["generate"]["rates"]["generate"]["served"] > 0 and report["generate"]["rates"]["generate"]["local"] > 0
    )
    assert report["dpo"]["dry_run"] is True and set(report["dpo"]["settings"]) == {"trl-default", "preflab"}


def test_every_bench_is_run_here():
    """A new bench must come with its small size: none is left to be found broken by hand."""
    scripts = {path.stem for path in (ROOT / "bench").glob("bench_*.py")}
    assert scripts == set(BENCHES) | {"bench_engine_vllm", "bench_engine_servers"}
