"""What the judges read over HTTP: a verdict's token log-probabilities and a reply's likelihood.

Against the fault app, which answers as vLLM 0.32 does (its prompt log-probabilities are
-0.1 per character of each token, so a reply's expected total is known).
"""

from __future__ import annotations

import json

import pytest

from preflab.errors import EngineError
from preflab.lm.engines import Likelihood, Logprobs, ReplyLogprob, TokenLogprobs

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

JUDGE = [
    {"role": "system", "content": "You are a fair judge."},
    {"role": "user", "content": "Which answer is better, A or B?\n[A] Paris\n[B] Lyon"},
]
HISTORY = [
    {"role": "user", "content": "Name a prime."},
    {"role": "assistant", "content": "7"},
    {"role": "user", "content": "Another one?"},
]


def sent(faults) -> list[dict]:
    return [json.loads(body) for body in faults.bodies]


def test_a_verdict_is_held_to_its_choices_on_vllm_and_read_from_its_first_token(fault_server, engine_for):
    url, faults = fault_server(owned_by="vllm")
    (verdict,) = engine_for(url).top_logprobs([Logprobs(JUDGE, choices=("A", "B"))])
    assert isinstance(verdict, TokenLogprobs) and verdict.text in ("A", "B")
    read = verdict.choice_logprobs(("A", "B"))
    other = "B" if verdict.text == "A" else "A"
    assert read == {verdict.text: -0.25, other: -1.5}
    (body,) = sent(faults)
    assert body["structured_outputs"] == {"choice": ["A", "B"]}
    assert body["logprobs"] is True and body["top_logprobs"] == 20 and body["temperature"] == 0.0


def test_a_reply_that_names_no_choice_is_an_abstention(fault_server, engine_for):
    url, faults = fault_server(owned_by="someone-else")
    (verdict,) = engine_for(url).top_logprobs([Logprobs(JUDGE, choices=("A", "B"), max_tokens=4)])
    assert "structured_outputs" not in sent(faults)[0]  # a server that offers no constraint gets none
    assert verdict.text.startswith("word") and verdict.choice_logprobs(("A", "B")) is None


def test_an_answer_start_is_continued_on_vllm(fault_server, engine_for):
    url, faults = fault_server()
    engine_for(url).top_logprobs([Logprobs(JUDGE, answer_start="Score: ", choices=tuple("012345"))])
    (body,) = sent(faults)
    assert body["messages"][-1] == {"role": "assistant", "content": "Score: "}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False


@pytest.mark.parametrize("offers", ["prompt_logprobs", "echo"])
def test_a_reply_is_scored_given_its_whole_history(fault_server, engine_for, tmp_path, offers):
    from tests.tiny_models import tiny_causal_lm

    # The echo path renders the chat template here, so the served name is a folder with a tokenizer.
    model = str(tiny_causal_lm(tmp_path / "served")) if offers == "echo" else "fault-model"
    url, faults = fault_server(model=model, prompt_logprobs=offers == "prompt_logprobs")
    engine = engine_for(url, model=model)
    results = engine.likelihood([Likelihood(HISTORY, "Eleven is prime"), Likelihood("Hi", "Hello there")])
    # -0.1 per character of each of the reply's tokens ("Eleven", " ", "is", " ", "prime").
    assert results[0].tokens == 5 and results[0].total == pytest.approx(-1.5)
    assert results[1] == ReplyLogprob(pytest.approx(-1.1), 3)
    assert engine.check_likelihood() == ("chat" if offers == "prompt_logprobs" else "echo")
    if offers == "prompt_logprobs":
        # The engine may send its asks concurrently: find the one for the reply with a history.
        (asked,) = [body for body in sent(faults) if body.get("messages", [{}])[-1].get("content") == "Eleven is prime"]
        assert asked["messages"] == [*HISTORY, {"role": "assistant", "content": "Eleven is prime"}]
        assert asked["prompt_logprobs"] == 0 and asked["continue_final_message"] is True


def test_a_server_without_prompt_logprobs_is_refused_before_any_paid_request(fault_server, engine_for):
    url, faults = fault_server(prompt_logprobs=False, echo=False)
    with pytest.raises(EngineError) as refused:
        engine_for(url).likelihood([Likelihood(HISTORY, "Eleven is prime")] * 5)
    assert str(refused.value).startswith(f"the server at {url} gives no prompt log-probabilities")
    # Only the two one-token probes were sent.
    assert faults.asked["chat"] == 1 and faults.asked["completions"] == 1
    assert all(body["max_tokens"] == 1 for body in sent(faults))


def test_requests_go_to_the_server_with_the_fewest_in_flight(fault_server, engine_for):
    from preflab.lm.engines import Generate

    first, faults_a = fault_server(delay=0.2)
    second, faults_b = fault_server(delay=0.2)
    engine = engine_for(f"{first},{second}", concurrency=8)
    engine.generate([Generate(f"prompt {i}") for i in range(40)])
    assert faults_a.peak == faults_b.peak == 4
    assert 16 <= faults_a.asked["chat"] <= 24 and faults_a.asked["chat"] + faults_b.asked["chat"] == 40
