"""The openai engine against the fault app: stored answers, retries, and the errors that stop a run.

Every test runs on a fresh SQLite file and a fresh Postgres schema (the request store).
"""

from __future__ import annotations

import json
import time

import pytest
from sqlalchemy import func, select

from preflab.db.requests import EngineRequest
from preflab.errors import EngineError
from preflab.lm.engines import Failed, Generate, Generation, Sampling

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

PROMPTS = [
    "What is the capital of France?",
    "How many legs does a spider have?",
    [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Name a prime."},
        {"role": "assistant", "content": "7"},
        {"role": "user", "content": "Another?"},
    ],
]


def asks(n: int = 4, seed: int = 3) -> list[Generate]:
    return [Generate(prompt, Sampling(32, 0.7, 0.9, seed), index=i) for prompt in PROMPTS for i in range(n)]


def stored(sessions) -> list[EngineRequest]:
    with sessions() as session:
        return list(session.scalars(select(EngineRequest).order_by(EngineRequest.id)))


def test_every_answer_is_stored_and_a_rerun_pays_for_nothing(fault_server, engine_for, sessions):
    url, faults = fault_server()
    first = engine_for(url).generate(asks())
    assert all(isinstance(r, Generation) and r.text for r in first)
    # Each sample of a prompt is its own request with its own seed: four different replies per prompt.
    assert all(len({r.text for r in first[k * 4 : (k + 1) * 4]}) == 4 for k in range(len(PROMPTS)))
    rows = stored(sessions)
    assert len(rows) == 12 == faults.asked["chat"]
    assert {row.status for row in rows} == {"ok"} and all(row.tokens_in > 0 and row.tokens_out > 0 for row in rows)
    # The conversation went as messages, its history whole.
    assert any(row.request["messages"] == PROMPTS[2] for row in rows)

    again = engine_for(url)
    second = again.generate(asks())
    assert second == first
    assert faults.asked["chat"] == 12  # nothing asked twice
    assert again.stats.cache_hits == 12 and again.stats.requests == 0 and again.stats.cost == 0
    # Asked for more samples, only the new ones are asked.
    third = engine_for(url).generate(asks(n=5))
    assert third[:4] == first[:4] and faults.asked["chat"] == 15 and len(stored(sessions)) == 15


def test_faults_are_retried_and_counted_with_nothing_lost_or_doubled(fault_server, engine_for, sessions):
    url, faults = fault_server(retry_after="1")
    faults.plan.extend(["429", "500", "broken", "drop"])
    engine = engine_for(url, max_retries=4, concurrency=4)
    began = time.monotonic()
    results = engine.generate(asks())
    assert all(isinstance(r, Generation) for r in results)
    assert engine.stats.retries == 4 and engine.stats.errors == 0 and engine.stats.requests == 12
    assert time.monotonic() - began >= 1.0  # the 429's Retry-After was waited for
    rows = stored(sessions)
    assert len(rows) == 12 and len({row.key for row in rows}) == 12
    assert sorted(faults.served.values()) == [1] * 12  # every ask answered once


def test_a_slow_answer_times_out_and_is_asked_again(fault_server, engine_for, sessions):
    url, faults = fault_server(slow=3.0)
    faults.plan.append("slow")
    engine = engine_for(url, timeout=0.5, max_retries=2)
    results = engine.generate(asks(n=1))
    assert all(isinstance(r, Generation) for r in results)
    assert engine.stats.retries == 1 and len(stored(sessions)) == 3


def test_an_ask_still_failing_after_every_retry_is_left_for_the_next_run(fault_server, engine_for, sessions):
    url, faults = fault_server()
    faults.always = "500"
    engine = engine_for(url, max_retries=1)
    results = engine.generate(asks(n=1))
    assert all(isinstance(r, Failed) and not r.quarantined and "500" in r.reason for r in results)
    assert engine.stats.errors == 3 and engine.stats.retries == 3 and stored(sessions) == []
    faults.always = None
    assert all(isinstance(r, Generation) for r in engine_for(url).generate(asks(n=1)))
    assert len(stored(sessions)) == 3


def test_an_item_over_the_context_length_is_quarantined_and_the_run_goes_on(fault_server, engine_for, sessions):
    url, faults = fault_server(max_context=300)
    long = "Summarise this. " + "word " * 100
    batch = [Generate("Hello?"), Generate(long), Generate("Goodbye?")]
    results = engine_for(url).generate(batch)
    assert isinstance(results[0], Generation) and isinstance(results[2], Generation)
    assert isinstance(results[1], Failed) and results[1].quarantined
    assert "maximum context length is 300" in results[1].reason
    rows = {row.status: row for row in stored(sessions)}
    assert rows["quarantined"].reason == results[1].reason
    # Asking again would be refused again: the stored refusal is the answer.
    again = engine_for(url)
    assert again.generate(batch) == results and again.stats.cache_hits == 3 and faults.asked["chat"] == 3


def test_a_key_the_server_refuses_stops_before_anything_is_asked(fault_server, engine_for, sessions, monkeypatch):
    url, faults = fault_server(key="sk-right-key")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong-key-123")
    with pytest.raises(EngineError) as refused:
        engine_for(url).generate(asks(n=1))
    assert str(refused.value) == f"the server at {url} refused the key (401): set OPENAI_API_KEY to a key it accepts"
    assert faults.asked["chat"] == 0


def test_the_key_is_sent_but_never_stored(fault_server, engine_for, sessions, monkeypatch):
    url, _faults = fault_server(key="sk-secret-4242")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-4242")
    engine = engine_for(url)
    assert all(isinstance(r, Generation) for r in engine.generate(asks(n=1)))
    dumped = json.dumps([(row.request, row.answer) for row in stored(sessions)])
    assert "sk-secret" not in dumped and "sk-secret" not in repr(engine.config)
    assert "sk-secret" not in json.dumps(engine.stats.as_dict())


def test_an_unknown_model_is_named_with_the_ones_the_server_has(fault_server, engine_for, sessions):
    url, faults = fault_server()
    with pytest.raises(EngineError) as unknown:
        engine_for(url, model="llama-9000").generate(asks(n=1))
    assert str(unknown.value) == f"the server at {url} has no model 'llama-9000'; it offers: fault-model"
    assert faults.asked["chat"] == 0


def test_a_server_that_does_not_answer_is_named(engine_for, sessions):
    from tests.fault_app import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(EngineError, match=f"^the server at {url} does not answer"):
        engine_for(url, max_retries=0).generate(asks(n=1))


def test_a_run_costs_its_tokens_at_the_prices_given(fault_server, engine_for, sessions):
    url, _ = fault_server()
    engine = engine_for(url, price_in=2.0, price_out=10.0)
    engine.generate(asks(n=2))
    with sessions() as session:
        tokens_in, tokens_out = session.execute(
            select(func.sum(EngineRequest.tokens_in), func.sum(EngineRequest.tokens_out))
        ).one()
    summary = engine.stats.as_dict()
    assert (summary["tokens_in"], summary["tokens_out"]) == (tokens_in, tokens_out)
    assert summary["cost"] == pytest.approx((tokens_in * 2 + tokens_out * 10) / 1e6)
    assert summary["requests"] == 6 and summary["seconds"] > 0
