"""One real vLLM OpenAI-compatible server per test session, on a free loopback port.

    def test_something(vllm_server):
        client = openai.OpenAI(base_url=vllm_server.url, api_key="EMPTY")
        client.chat.completions.create(model=vllm_server.model, ...)

vLLM runs on the CPU from its own virtual environment (`make vllm-venv`, $PREFLAB_VLLM_PYTHON),
as Label Studio does: its torch and transformers pins clash with ours. It serves the embedded
SmolLM2's converted folder, the same folder `embedded_model_cache` gives the in-process tests
of the session (so both read the same weights), under the embedded name and a second one.

The fixture is session-scoped and lazy: the server starts when the first test that asks for
it runs, and stops at the end of the session. bench/vllm_process.py starts and stops it, with
the settings sized for a test machine of two cores (the reasons are there).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.vllm_process import MAX_MODEL_LEN, SERVED_MODEL, VllmStartError, start, stop
from tests.labelling.ls_fixtures import server_port

# Measured on the 2-core machine under other tests' load: 27-96 s to /health.
START_TIMEOUT_S = 360
# The one model under a second name too (--served-model-name takes several): a panel's two members on one server.
SECOND_NAME = f"{SERVED_MODEL}-b"


@dataclass(frozen=True)
class VllmServer:
    url: str  # the OpenAI base URL, ending in /v1
    model: str  # the served model's name
    second: str  # the same model under another name
    model_dir: Path  # the converted folder it serves
    log: Path  # the server's stdout and stderr
    start_s: float  # seconds from the start to /health answering
    max_model_len: int = MAX_MODEL_LEN


def converted_model(tmp_path_factory) -> Path:
    """The embedded model's converted folder, in the run's one model cache (`embedded_model_cache`'s)."""
    from tests.tiny_models import shared_model_cache

    return shared_model_cache(tmp_path_factory) / SERVED_MODEL


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory) -> VllmServer:
    """A real vLLM server serving the embedded SmolLM2, started at its first use and stopped at the session's end."""
    model_dir = converted_model(tmp_path_factory)
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    began = time.monotonic()
    try:  # a port outside the kernel's range for outgoing connections, as Label Studio's
        process, root = start(model_dir, log, server_port(), START_TIMEOUT_S, served_names=(SERVED_MODEL, SECOND_NAME))
    except VllmStartError as error:  # its message alone, as a failure rather than an error with a traceback
        raise pytest.fail.Exception(str(error), pytrace=False) from None
    started_s = time.monotonic() - began
    with log.open("a", encoding="utf-8") as out:  # the start's cost, for whoever reads the log
        out.write(f"\n[preflab tests] /health answered {started_s:.1f} s after the start\n")
    try:
        yield VllmServer(
            url=f"{root}/v1", model=SERVED_MODEL, second=SECOND_NAME, model_dir=model_dir, log=log, start_s=started_s
        )
    finally:
        stop(process)
