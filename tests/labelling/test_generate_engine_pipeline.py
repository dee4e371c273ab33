"""`preflab pipeline --engine openai`: the main job generates and judges on a server (the fault app).

On SQLite and Postgres: the candidates are the server's, the likelihood judge reads its prompt
log-probabilities there, the engine's stats are in the generate step's report, and a re-run keeps
what the first run made.
"""

from __future__ import annotations

import json

import pytest

from tests.lm.engines.conftest import fault_server, no_outside_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out


def test_the_pipeline_generates_and_judges_on_a_server(cli, fault_server, tmp_path):
    url, faults = fault_server()
    args = (
        "--model",
        "fault-model",
        "pipeline",
        "--engine",
        "openai",
        "--api-base",
        url,
        "--max-prompts",
        2,
        "-n",
        2,
        "--out",
        tmp_path / "out",
    )
    report = json.loads(cli(*args, "--json").stdout)
    generated = report["generate"]
    assert (generated["stored"], generated["prompts"], generated["model"]) == (4, 2, "openai:fault-model")
    assert generated["engine"]["requests"] == 4 and generated["engine"]["cache_hits"] == 0
    judged = report["judge"]
    assert judged["ranked"] == report["import"]["new_prompts"] + 2
    # The judge read its log-probabilities from the server too: one request per candidate it scored.
    assert faults.asked["chat"] + faults.asked["completions"] > 4 + judged["ranked"]
    assert report["export"]["train"] + report["export"]["test"] > 0

    again = cli(*args).output
    assert "generate: 0 new candidates for 0 prompts with openai:fault-model" in again
    assert f"ranked 0 prompts ({judged['ranked']:,} already ranked)" in again
