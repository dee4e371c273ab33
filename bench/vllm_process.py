"""Starting and stopping a real vLLM OpenAI-compatible server in a child process: bench_engine_vllm.py's and the tests'.

vLLM runs on the CPU from its own virtual environment (`make vllm-venv`, $PREFLAB_VLLM_PYTHON,
else ~/.cache/vllm-venv): its torch and transformers pins clash with ours. `start` launches it on
a given loopback port in a process group of its own, writing to a log, and waits for /health;
`stop` ends the group. The settings are sized for a machine of two cores: no compilation
(`--enforce-eager`: the first compiled start took 295 s here, a cached one 240 s, an eager one
27-60 s, all of it imports), a 2,048-token context and 1 GiB of KV cache (23,296 tokens; about
3.9 GB resident in all). vLLM's own thread binding is kept: on two cores it computes on one and
leaves the other to its HTTP front end, which answered a single request's tokens 2.5 times, and
32 concurrent requests 6 times, as fast as binding both cores (VLLM_CPU_OMP_THREADS_BIND=0-1).
Keeping the engine's worker in its process (VLLM_ENABLE_V1_MULTIPROCESSING=0) saves one process
start but halves decoding speed.

The benches import this as `vllm_process` (run as `python bench/bench_NAME.py`), the tests as
`bench.vllm_process`, so it imports no other bench module; a failed start raises `VllmStartError`,
which each caller turns into its own kind of failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

SERVED_MODEL = "smollm2-135m-instruct"
MAX_MODEL_LEN = 2048
KV_CACHE_GIB = 1
STOP_TIMEOUT_S = 30
# vllm-cpu 0.32.0's engine dies ("CPU Generator does not use offset", gpu_model_runner.py _bookkeeping_sync) when a
# seeded request's prompt is split across steps (chunked prefill), and every sample preflab asks for is seeded; with
# 64 prompts in flight they pass the step's 2,048-token budget and one is split.
NO_CHUNKED_PREFILL = ("--no-enable-chunked-prefill",)


class VllmStartError(RuntimeError):
    """vLLM's server could not be started, or did not answer /health in time; the message says why."""


def vllm_python() -> Path:
    default = Path.home() / ".cache" / "vllm-venv" / "bin" / "python"
    return Path(os.environ.get("PREFLAB_VLLM_PYTHON") or default)


def server_command(
    python: Path,
    model_dir: Path,
    port: int,
    served_names: Sequence[str] = (SERVED_MODEL,),
    max_model_len: int = MAX_MODEL_LEN,
    extra_args: Sequence[str] = (),
) -> list[str]:
    return [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        *served_names,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(max_model_len),
        "--disable-uvicorn-access-log",
        *device_args(),
        *extra_args,
    ]


def device_args() -> tuple[str, ...]:
    """What the device needs: on a CUDA machine (nvidia-smi on the PATH) bf16 with vLLM's own defaults (CUDA
    graphs, chunked prefill); on the CPU float32, eager, no chunked prefill (see above)."""
    if shutil.which("nvidia-smi"):
        return ("--dtype", "bfloat16")
    return ("--dtype", "float32", "--enforce-eager", *NO_CHUNKED_PREFILL)


def server_env(kv_cache_gib: float = KV_CACHE_GIB) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        VLLM_CPU_KVCACHE_SPACE=f"{kv_cache_gib:g}", HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", VLLM_DO_NOT_TRACK="1"
    )
    env.pop("PYTHONPATH", None)  # our venv's packages must not shadow vLLM's
    return env


def healthy(root: str) -> bool:
    try:
        with urllib.request.urlopen(f"{root}/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def log_tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


def start(
    model_dir: Path,
    log: Path,
    port: int,
    timeout: float,
    served_names: Sequence[str] = (SERVED_MODEL,),
    kv_cache_gib: float = KV_CACHE_GIB,
    max_model_len: int = MAX_MODEL_LEN,
    extra_args: Sequence[str] = (),
    cpus: str | None = None,
) -> tuple[subprocess.Popen, str]:
    """Start the server on `port` and wait for its /health; (process, root URL). `extra_args` go to vLLM as given;
    `cpus` ("0", "0-1") pins the server and every process it starts to those cores (`taskset`), and binds its
    engine's threads to them (VLLM_CPU_OMP_THREADS_BIND).

    Raises:
        VllmStartError: vLLM's venv is missing, or the server exited or stayed silent for `timeout` seconds
            (it is stopped then).
    """
    python = vllm_python()
    if not python.is_file():
        raise VllmStartError(f"vLLM's virtual environment is missing ({python}): run `make vllm-venv`.")
    root = f"http://127.0.0.1:{port}"
    with log.open("ab") as out:  # appending, so the caller's own lines cannot be written over
        # Its own session, so stopping it stops the engine process it spawns too.
        process = subprocess.Popen(
            [
                *(("taskset", "-c", cpus) if cpus else ()),
                *server_command(python, model_dir, port, served_names, max_model_len, extra_args),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=server_env(kv_cache_gib) | ({"VLLM_CPU_OMP_THREADS_BIND": cpus} if cpus else {}),
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while not healthy(root):
        if process.poll() is not None:
            stop(process)  # the engine's process may outlive the server
            raise VllmStartError(
                f"vLLM exited with status {process.returncode} before it answered; its log "
                f"({log}) ends:\n{log_tail(log)}"
            )
        if time.monotonic() > deadline:
            stop(process)
            raise VllmStartError(
                f"vLLM did not answer {root}/health within {timeout:.0f} s; its log ({log}) ends:\n{log_tail(log)}"
            )
        time.sleep(0.5)
    return process, root


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (vLLM shuts its engine down), SIGKILL if it lingers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):  # the engine's process may outlive the server by a moment
        os.killpg(process.pid, signal.SIGKILL)
