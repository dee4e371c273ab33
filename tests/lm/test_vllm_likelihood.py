"""Served and in-process engines score the same tokens, and give the same scores (issue 46 §1e, §2 Engines).

On the real vLLM server (tests/vllm_server.py) and in process on the folder it serves, for
awkward replies (tests/lm/awkward.py: cut at 64 tokens holding `\\n\\n`, mid-word, mid-`\\n\\n`,
mid-character; leading newlines, trailing spaces, emoji, CJK, the template's marker; after one
turn and after several), fixed and generated:

- a reply's likelihood is over the same number of tokens and agrees to 1e-4 per token, from
  vLLM's prompt log-probabilities (the chat path) and from its completions with `echo` read as
  the echo path reads them;
- a judge prompt holding them gets the same first-token alternatives, to 1e-4.

Each check is one batch: the server answers a batch at once.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings

from preflab.lm.engines import EngineConfig, Likelihood, Logprobs, ReplyLogprob, open_engine
from tests.lm.awkward import asks, cut, fixed
from tests.properties import examples

TOLERANCE = 1e-4  # per token, in nats


@pytest.fixture(scope="module")
def engines(vllm_server, tmp_path_factory):
    """(the openai engine on vLLM, the transformers engine on the folder it serves), on one SQLite store."""
    import torch

    from preflab.db.engine import open_database, session_factory
    from preflab.lm.loading import load_causal_lm
    from preflab.lm.names import NamedModel

    sessions = session_factory(open_database(f"sqlite:///{tmp_path_factory.mktemp('store') / 'preflab.db'}"))
    model, tokenizer = load_causal_lm(vllm_server.model_dir, device="cpu")
    config = EngineConfig(engine="openai", api_base=vllm_server.url, model=vllm_server.model, concurrency=16)
    # vLLM computes on one of the test machine's two cores: two torch threads beside it wait on each other
    # (24 replies in 28 s, against 5 s on one thread).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with open_engine(config, sessions) as served:
            yield served, open_engine(model=NamedModel("in-process", "", None, model, tokenizer), batch_size=8)
    finally:
        torch.set_num_threads(threads)


def assert_same(served: list, local: list[ReplyLogprob], pairs) -> None:
    for result, expected, (history, reply) in zip(served, local, pairs):
        where = f"{reply!r} after {len(history)} turns"
        assert isinstance(result, ReplyLogprob), where
        assert result.tokens == expected.tokens, where
        if expected.tokens:
            assert abs(result.mean - expected.mean) < TOLERANCE, where
            assert abs(result.total - expected.total) < TOLERANCE * expected.tokens, where


def test_awkward_replies_score_the_same_served_and_in_process(engines, vllm_server):
    import openai

    from preflab.lm.engines import wire
    from preflab.lm.replies import rendered, reply_tokens

    served, local = engines
    tokenizer = local.tokenizer
    pairs = fixed(tokenizer)
    replies = [reply for _, reply in pairs]  # 12 after a conversation of several turns, then 5 after one
    assert "\n\n" in replies[0] and replies[1].endswith("Eif") and replies[2].endswith(".\n")
    assert replies[3].endswith("\ufffd") and len(tokenizer(replies[0])["input_ids"]) == 64
    # A reply's leading newlines merge with the template's last newline: one token, the reply's on both sides.
    history, leading = pairs[4]
    context = tokenizer(rendered(tokenizer, history, leading)[0], add_special_tokens=False)["input_ids"]
    ids, n = reply_tokens(tokenizer, history, leading)
    assert len(ids) - n == len(context) - 1 and tokenizer.decode(ids[-n]) == "\n\n"

    asked = [Likelihood(history, reply) for history, reply in pairs]
    expected = local.likelihood(asked)
    assert_same(served.likelihood(asked), expected, pairs)
    assert all((e.tokens > 0) == (reply != "") for e, reply in zip(expected, replies))

    # The echo path (servers without prompt_logprobs), read from vLLM's own completions with echo.
    client = openai.OpenAI(base_url=vllm_server.url, api_key="EMPTY", max_retries=0, timeout=300)

    def echo(pair) -> ReplyLogprob:
        context, whole = rendered(tokenizer, *pair)
        raw = client.completions.with_raw_response.create(**wire.likelihood_echo_body(vllm_server.model, whole))
        return wire.read_likelihood_echo(json.loads(raw.text), context, whole)

    with ThreadPoolExecutor(8) as pool:  # the server answers them together
        assert_same(list(pool.map(echo, pairs[:12])), expected[:12], pairs[:12])


@settings(max_examples=examples(3))
@given(batch=asks(min_size=3, max_size=4))
def test_generated_awkward_replies_score_the_same_served_and_in_process(engines, batch):
    served, local = engines
    pairs = [(history, cut(local.tokenizer, *spec)) for history, spec in batch]
    asked = [Likelihood(history, reply) for history, reply in pairs]
    assert_same(served.likelihood(asked), local.likelihood(asked), pairs)


def test_a_judge_prompt_holding_them_reads_the_same_first_token(engines):
    from preflab.labelling.judges import pairwise

    served, local = engines
    pairs = fixed(local.tokenizer)
    history, replies = pairs[0][0], [reply for _, reply in pairs]
    asked = [
        Logprobs(pairwise.judge_messages(history, replies[0], replies[7]), top_logprobs=10),
        Logprobs(pairwise.judge_messages(history, replies[3], replies[8]), top_logprobs=10),
        Logprobs(pairwise.judge_messages(history, replies[5], replies[10]), answer_start="Score: ", top_logprobs=10),
    ]
    for result, expected in zip(served.top_logprobs(asked), local.top_logprobs(asked)):
        # A character's byte piece reads "" on vLLM and U+FFFD here (and two pieces are one key): tokens are
        # compared where both spell them whole.
        assert _whole(result.tokens[:1]) == _whole(expected.tokens[:1])
        both = {t for t in set(result.first) & set(expected.first) if t and "\ufffd" not in t}
        assert len(both) >= 3
        assert max(abs(result.first[t] - expected.first[t]) for t in both) < TOLERANCE


def _whole(tokens: list[str]) -> list[str]:
    return [t.replace("\ufffd", "") for t in tokens]
