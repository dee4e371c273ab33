"""One real vLLM OpenAI-compatible server per test session, on a free loopback port.

    def test_something(vllm_server):
        client = openai.OpenAI(base_url=vllm_server.url, api_key="EMPTY")
        client.chat.completions.create(model=vllm_server.model, ...)

vLLM runs on the CPU from its own virtual environment (`make vllm-venv`, $PREFLAB_VLLM_PYTHON),
as Label Studio does: its torch and transformers pins clash with ours. It serves the embedded
SmolLM2's converted folder, the same folder `embedded_model_cache` gives the in-process tests
of the session (so both read the same weights), under the embedded name.

The fixture is session-scoped and lazy: the server starts when the first test that asks for
it runs, and stops at the end of the session. It is sized for a test machine of two cores:
no compilation (`--enforce-eager`: the first compiled start took 295 s here, a cached one
240 s, an eager one 27-60 s, all of it imports), a 2,048-token context and 1 GiB of KV cache
(23,296 tokens; about 3.9 GB resident in all). vLLM's own thread binding is kept: on two
cores it computes on one and leaves the other to its HTTP front end, which answered a
single request's tokens 2.5 times, and 32 concurrent requests 6 times, as fast as binding
both cores (VLLM_CPU_OMP_THREADS_BIND=0-1). Keeping the engine's worker in its process
(VLLM_ENABLE_V1_MULTIPROCESSING=0) saves one process start but halves decoding speed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.labelling.ls_fixtures import server_port

SERVED_MODEL = "smollm2-135m-instruct"
MAX_MODEL_LEN = 2048
# Measured on the 2-core machine under other tests' load: 27-96 s to /health.
START_TIMEOUT_S = 360
STOP_TIMEOUT_S = 30


@dataclass(frozen=True)
class VllmServer:
    url: str  # the OpenAI base URL, ending in /v1
    model: str  # the served model's name
    model_dir: Path  # the converted folder it serves
    log: Path  # the server's stdout and stderr
    start_s: float  # seconds from the start to /health answering
    max_model_len: int = MAX_MODEL_LEN


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


def converted_model(tmp_path_factory) -> Path:
    """The embedded model's converted folder, where `embedded_model_cache` puts it, converting it if needed."""
    from preflab.lm.loading import embedded_model

    cache = Path(os.environ.get("PREFLAB_MODEL_CACHE") or tmp_path_factory.getbasetemp() / "model-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PREFLAB_MODEL_CACHE", str(cache))
        return embedded_model(SERVED_MODEL)[0]


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory) -> VllmServer:
    """A real vLLM server serving the embedded SmolLM2, started at its first use and stopped at the session's end."""
    model_dir = converted_model(tmp_path_factory)
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    began = time.monotonic()
    process, root = start(model_dir, log)
    started_s = time.monotonic() - began
    with log.open("a", encoding="utf-8") as out:  # the start's cost, for whoever reads the log
        out.write(f"\n[preflab tests] /health answered {started_s:.1f} s after the start\n")
    try:
        yield VllmServer(url=f"{root}/v1", model=SERVED_MODEL, model_dir=model_dir, log=log, start_s=started_s)
    finally:
        stop(process)
