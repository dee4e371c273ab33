"""`preflab generate --engine openai`: candidates from an OpenAI-compatible server, every answer paid for once.

Against the fault-injecting app (tests/fault_app.py) on a loopback port, on SQLite and Postgres:
the candidates are stored under the served model's name, a conversation goes out as its messages,
a re-run pays for nothing it asked before, a prompt over the context length is quarantined with
the server's reason, unanswered samples are left for the next run, and a run killed with
`kill -9` is finished by a re-run that asks only for what is missing.
"""

from __future__ import annotations

import json
import signal
import time

import pytest
from sqlalchemy import delete, func, select

from preflab.db.models import Candidate, ModelVersion, Prompt
from preflab.db.requests import EngineRequest
from tests.db.procs import start
from tests.lm.conversations import FRANCE
from tests.lm.engines.conftest import fault_server, no_outside_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

QUESTIONS = ["What is the capital of France?", "Write a short poem about the sea.", "How many legs does a spider have?"]


def write_prompts(path, prompts) -> str:
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts), encoding="utf-8")
    return str(path)


def on_server(url: str, *args) -> list[str]:
    return ["generate", "--engine", "openai", "--api-base", url, "--model", "fault-model", *map(str, args)]


def count(sessions, table) -> int:
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(table))


def test_candidates_from_a_server_are_named_after_it_and_a_conversation_goes_as_messages(
    cli, sessions, fault_server, tmp_path
):
    url, faults = fault_server()
    prompts = write_prompts(tmp_path / "p.jsonl", [*QUESTIONS, FRANCE])
    out = json.loads(
        cli(*on_server(url, "--prompts", prompts, "-n", 3, "--price-in", 1, "--price-out", 2, "--json")).stdout
    )
    assert (out["stored"], out["prompts"], out["short"], out["model"]) == (12, 4, 0, "openai:fault-model")
    stats = out["engine"]
    assert stats["requests"] == 12 == faults.asked["chat"] and stats["cache_hits"] == 0
    assert stats["tokens_out"] == 12 * 8 and stats["retries"] == stats["errors"] == 0
    assert stats["cost"] == round((stats["tokens_in"] * 1 + stats["tokens_out"] * 2) / 1e6, 6) > 0
    with sessions.begin() as session:
        rows = session.scalars(select(Candidate)).all()
        assert {r.model for r in rows} == {"openai:fault-model"}
        assert {session.get(ModelVersion, r.model_version_id).name for r in rows} == {"openai:fault-model"}
        by_prompt: dict[int, list[int]] = {}
        for r in rows:
            by_prompt.setdefault(r.prompt_id, []).append(r.sampling["index"])
        assert sorted(map(sorted, by_prompt.values())) == [[0, 1, 2]] * 4
        assert session.scalar(select(func.count()).select_from(Prompt).where(Prompt.messages.is_not(None))) == 1
    # The conversation went out whole, as messages: its system prompt and earlier turns, for the server's template.
    sent = [json.loads(body)["messages"] for body in faults.bodies]
    assert sum(messages == FRANCE for messages in sent) == 3
    assert sum(messages == [{"role": "user", "content": q}] for messages in sent for q in QUESTIONS) == 9
    # `stats` counts what the store holds from servers: each answer paid for once, with its tokens.
    used = json.loads(cli("stats", "--json").stdout)["engine"]
    assert used == {
        "fault-model": {"answers": 12, "quarantined": 0, "tokens_in": stats["tokens_in"], "tokens_out": 12 * 8}
    }
    assert f"engine fault-model: 12 answers stored (0 quarantined), {stats['tokens_in']:,} tokens in, 96 out" in (
        cli("stats").output
    )

    line = cli(*on_server(url, "--prompts", prompts, "-n", 4)).output
    assert "generated 4 candidates for 4 prompts with openai:fault-model" in line
    assert "openai fault-model: 4 requests (0 answered from the store)" in line


def test_a_re_run_pays_for_nothing_it_asked_before(cli, sessions, fault_server, tmp_path):
    url, faults = fault_server()
    prompts = write_prompts(tmp_path / "p.jsonl", QUESTIONS)
    first = json.loads(cli(*on_server(url, "--prompts", prompts, "-n", 2, "--json")).stdout)
    assert first["stored"] == 6 and faults.asked["chat"] == 6

    again = json.loads(cli(*on_server(url, "--prompts", prompts, "-n", 2, "--json")).stdout)
    assert again["prompts"] == again["stored"] == 0 and faults.asked["chat"] == 6

    # The candidates gone (deleted by hand), the same asks are answered from the request store, for nothing.
    with sessions.begin() as session:
        session.execute(delete(Candidate))
    redo = json.loads(cli(*on_server(url, "--prompts", prompts, "-n", 2, "--json")).stdout)
    assert redo["stored"] == 6 and faults.asked["chat"] == 6
    assert (redo["engine"]["requests"], redo["engine"]["cache_hits"], redo["engine"]["cost"]) == (0, 6, 0)
    assert count(sessions, EngineRequest) == 6


def test_a_prompt_over_the_context_length_is_quarantined_with_the_servers_reason(cli, sessions, fault_server, tmp_path):
    url, faults = fault_server(max_context=300)
    long = "Summarise this: " + "words " * 100
    prompts = write_prompts(tmp_path / "p.jsonl", [*QUESTIONS, long])
    out = json.loads(cli(*on_server(url, "--prompts", prompts, "-n", 2, "--json")).stdout)
    assert (out["stored"], out["quarantined"], out["failed"], out["short"]) == (6, 1, 0, 1)
    ((reason, samples),) = out["reasons"].items()
    assert "maximum context length is 300" in reason and samples == 2
    assert out["engine"]["quarantined"] == 2 and faults.asked["chat"] == 8  # not asked again in a later round
    with sessions.begin() as session:
        kept = session.execute(
            select(EngineRequest.status, EngineRequest.reason).where(EngineRequest.status == "quarantined")
        ).all()
    assert [status for status, _ in kept] == ["quarantined"] * 2 and all(r == reason for _, r in kept)

    again = cli(*on_server(url, "--prompts", prompts, "-n", 2))
    assert faults.asked["chat"] == 8  # the server's refusal is read back, never asked for again
    assert "quarantined 1 prompt the server refused" in again.output
    assert "2 × This model's maximum context length is 300" in again.output


def test_samples_without_an_answer_are_left_for_the_next_run(cli, sessions, fault_server, tmp_path):
    url, faults = fault_server(always="500")
    prompts = write_prompts(tmp_path / "p.jsonl", QUESTIONS)
    out = cli(*on_server(url, "--prompts", prompts, "-n", 2, "--max-retries", 0, "--max-rounds", 1))
    assert "generated 0 candidates for 3 prompts" in out.output and "3 prompts short of 2" in out.output
    assert "6 samples had no answer after every retry" in out.output
    assert count(sessions, Candidate) == 0 and count(sessions, EngineRequest) == 0

    faults.always = None
    redo = json.loads(cli(*on_server(url, "--prompts", prompts, "-n", 2, "--json")).stdout)
    assert redo["stored"] == 6 and redo["failed"] == 0 and redo["engine"]["requests"] == 6
    assert faults.asked["chat"] == 12


def test_a_run_killed_mid_way_is_finished_asking_only_for_what_is_missing(
    cli, sessions, db_url, fault_server, tmp_path
):
    url, faults = fault_server(delay=0.2)
    prompts = write_prompts(tmp_path / "p.jsonl", [f"Question number {i}: why?" for i in range(20)])
    cli("import", "prompts", prompts)
    asks = 20 * 4
    # Four in flight, 16 asks to a call: candidates are stored after each call, answers as they arrive.
    proc = start(db_url, *on_server(url, "-n", 4, "--concurrency", 4))
    deadline = time.monotonic() + 120
    while count(sessions, EngineRequest) < 20:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run did not get far enough to be killed mid-way"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    kept, asked_before = count(sessions, EngineRequest), faults.asked["chat"]
    with sessions() as session:
        done = session.scalar(select(func.count(func.distinct(Candidate.prompt_id))))
        assert session.scalar(select(func.count()).select_from(Candidate)) == 4 * done
    assert 20 <= kept < asks and done < 20

    redo = json.loads(cli(*on_server(url, "-n", 4, "--concurrency", 4, "--json")).stdout)
    assert redo["stored"] == asks - 4 * done and redo["prompts"] == 20 - done
    assert redo["engine"]["requests"] == asks - kept == faults.asked["chat"] - asked_before
    assert redo["engine"]["cache_hits"] == kept - 4 * done
    assert count(sessions, Candidate) == count(sessions, EngineRequest) == asks


def test_a_server_that_cannot_be_used_stops_the_run_with_one_sentence(cli, sessions, fault_server, tmp_path):
    from tests.fault_app import free_port

    url, faults = fault_server(key="right-key")
    prompts = write_prompts(tmp_path / "p.jsonl", QUESTIONS)
    refused = cli(*on_server(url, "--prompts", prompts), expect_ok=False)
    assert refused.exit_code != 0 and f"the server at {url} refused the key (401)" in refused.output
    assert "right-key" not in refused.output and "Traceback" not in refused.output

    url, faults = fault_server()
    unknown = cli(
        "generate",
        "--engine",
        "openai",
        "--api-base",
        url,
        "--model",
        "no-such-model",
        "--prompts",
        prompts,
        expect_ok=False,
    )
    assert unknown.exit_code != 0 and "has no model 'no-such-model'; it offers: fault-model" in unknown.output
    silent = f"http://127.0.0.1:{free_port()}/v1"
    down = cli(*on_server(silent, "--prompts", prompts), expect_ok=False)
    assert down.exit_code != 0 and f"the server at {silent} does not answer" in down.output
    assert faults.asked["chat"] == 0 and count(sessions, Candidate) == count(sessions, EngineRequest) == 0
