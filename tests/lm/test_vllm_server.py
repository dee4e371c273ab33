"""What vLLM 0.32's OpenAI-compatible server answers, asked through the official `openai` client.

These are the request shapes the openai engine and its judges rely on, each checked on the real
server (tests/vllm_server.py) with a small request, and its numbers against in-process
transformers on the same converted folder:

- chat with `logprobs=True, top_logprobs=k` (k <= 20): the first token's alternatives, as the
  transformers engine reads them for the pairwise and score judges (`next_token_logprobs`);
- `extra_body={"structured_outputs": {"choice": [...]}}` constrains the answer (vLLM 0.32 ignores
  the old `guided_choice`), and its `top_logprobs` are renormalised over the allowed tokens;
- prompt log-probabilities, for the likelihood judge: completions with `echo=True, logprobs=0`
  and `max_tokens=0`, or `extra_body={"prompt_logprobs": 0}` on completions and on chat, where
  they sit at the top of the answer beside `prompt_token_ids` (`return_token_ids`);
- `n` samples with a `seed`: sample i is the sample of seed + i;
- `/v1/models`, and the 404 and 400 an unknown model and an over-long prompt get.
"""

from __future__ import annotations

import json
import math

import openai
import pytest

from preflab.lm.forward import next_token_logprobs
from preflab.lm.loading import chat_prompt, load_causal_lm
from preflab.lm.replies import reply_logprobs, reply_tokens

PAIRWISE = [
    {"role": "system", "content": "You compare two answers."},
    {
        "role": "user",
        "content": "Which answer is better, A or B? Answer with one letter.\n"
        "A: Paris is the capital of France.\nB: Lyon is the capital of France.",
    },
]
HISTORY = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "How many legs does a spider have?"},
    {"role": "assistant", "content": "Eight."},
    {"role": "user", "content": "And an ant?"},
]
TOLERANCE = 1e-3  # per token, in nats


@pytest.fixture(scope="module")
def client(vllm_server):
    return openai.OpenAI(base_url=vllm_server.url, api_key="EMPTY", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def local(vllm_server):
    """The same converted folder in process: (model, tokenizer)."""
    return load_causal_lm(vllm_server.model_dir, device="cpu")


def token_logprobs(model, ids: list[int]) -> list[float]:
    """log p(ids[t] | ids[:t]) for t >= 1, in one forward pass."""
    import torch

    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float().log_softmax(-1)
    return logits.gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1).tolist()


def likelihood_ids(tokenizer, history, reply: str) -> tuple[list[int], int]:
    """The likelihood judge's tokens for (history, reply): (ids, reply tokens), as `preflab.lm.replies` splits them."""
    from preflab.lm.replies import reply_tokens

    return reply_tokens(tokenizer, history, reply)


def test_models_lists_the_served_names(client, vllm_server):
    models = client.models.list().data
    assert [m.id for m in models] == [vllm_server.model, vllm_server.second]
    assert models[0].owned_by == "vllm"
    assert models[0].model_extra["max_model_len"] == vllm_server.max_model_len


def test_first_token_top_logprobs_equal_in_process(client, vllm_server, local):
    model, tokenizer = local
    answer = client.chat.completions.create(
        model=vllm_server.model,
        messages=PAIRWISE,
        max_tokens=1,
        temperature=0,
        logprobs=True,
        top_logprobs=5,
        extra_body={"return_tokens_as_token_ids": True},
    )  # tokens as "token_id:65": no decoding ambiguity
    first = answer.choices[0].logprobs.content[0]
    top = [(int(t.token.removeprefix("token_id:")), t.logprob) for t in first.top_logprobs]
    assert len(top) == 5 and [lp for _, lp in top] == sorted((lp for _, lp in top), reverse=True)
    assert first.token == f"token_id:{top[0][0]}"  # greedy: the answer is the top token
    assert answer.choices[0].message.content == tokenizer.decode([top[0][0]])
    asked = tokenizer.apply_chat_template(PAIRWISE, add_generation_prompt=True, tokenize=True, return_dict=True)
    assert answer.usage.completion_tokens == 1 and answer.usage.prompt_tokens == len(asked["input_ids"])
    in_process = next_token_logprobs(model, tokenizer, [chat_prompt(tokenizer, PAIRWISE)], [t for t, _ in top])[0]
    assert max(abs(a - b) for (_, a), b in zip(top, in_process)) < TOLERANCE


def test_structured_choice_constrains_and_renormalises(client, vllm_server):
    def ask(extra: dict):
        answer = client.chat.completions.create(
            model=vllm_server.model,
            messages=PAIRWISE,
            max_tokens=1,
            temperature=0,
            logprobs=True,
            top_logprobs=3,
            extra_body=extra,
        )
        return answer.choices[0].message.content, answer.choices[0].logprobs.content[0].top_logprobs

    free, free_top = ask({})
    assert free == "A" and [t.token for t in free_top[:2]] == ["A", "B"]
    chosen, top = ask({"structured_outputs": {"choice": ["A", "B"]}})
    allowed = {t.token: t.logprob for t in top if t.logprob > -9999}
    assert chosen == "A" and set(allowed) == {"A", "B"}
    assert math.isclose(math.log(sum(math.exp(lp) for lp in allowed.values())), 0.0, abs_tol=1e-4)
    assert all(t.logprob == -9999.0 for t in top if t.token not in allowed)  # masked tokens
    forced, _ = ask({"structured_outputs": {"choice": ["B"]}})
    assert forced == "B"
    # The pre-0.12 field is dropped with a warning in the server's log: the answer is not constrained.
    ignored, _ = ask({"guided_choice": ["B"]})
    assert ignored == "A"


def test_response_format_json_schema(client, vllm_server):
    schema = {"type": "object", "properties": {"better": {"enum": ["A", "B"]}}, "required": ["better"]}
    answer = client.chat.completions.create(
        model=vllm_server.model,
        messages=PAIRWISE,
        max_tokens=40,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema}},
    )
    assert json.loads(answer.choices[0].message.content)["better"] in {"A", "B"}


def test_echo_logprobs_give_prompt_logprobs_equal_in_process(client, vllm_server, local):
    model, tokenizer = local
    ids, _n = likelihood_ids(
        tokenizer, [{"role": "user", "content": "What is the capital of France?"}], "The capital of France is Paris."
    )
    # A prompt of token ids is scored as given; max_tokens=0 generates nothing.
    answer = client.completions.create(
        model=vllm_server.model, prompt=ids, max_tokens=0, echo=True, logprobs=0, temperature=0
    )
    served = answer.choices[0].logprobs.token_logprobs
    assert len(served) == len(ids) and served[0] is None  # the first token has no context
    assert max(abs(a - b) for a, b in zip(served[1:], token_logprobs(model, ids))) < TOLERANCE
    assert answer.usage.prompt_tokens == len(ids)


def test_prompt_logprobs_of_a_conversation_equal_the_likelihood_judge(client, vllm_server, local):
    model, tokenizer = local
    reply = "An ant has six legs, like every insect."
    ids, n = likelihood_ids(tokenizer, HISTORY, reply)
    answer = client.completions.create(
        model=vllm_server.model, prompt=ids, max_tokens=1, temperature=0, extra_body={"prompt_logprobs": 0}
    )
    entries = answer.choices[0].prompt_logprobs  # [None, {"<token id>": {"logprob", "rank", "decoded_token"}}, …]
    assert entries[0] is None and len(entries) == len(ids)
    served = [entry[str(token)]["logprob"] for entry, token in zip(entries[1:], ids[1:])]
    assert max(abs(a - b) for a, b in zip(served, token_logprobs(model, ids))) < TOLERANCE
    total, tokens = reply_logprobs(model, [reply_tokens(tokenizer, HISTORY, reply)], tokenizer.pad_token_id)[0]
    assert tokens == n and abs(sum(served[-n:]) - total) < TOLERANCE * n


def test_chat_prompt_logprobs_use_the_models_chat_template(client, vllm_server, local):
    _, tokenizer = local
    messages = [*HISTORY, {"role": "assistant", "content": "Six."}]
    answer = client.chat.completions.create(
        model=vllm_server.model,
        messages=messages,
        max_tokens=1,
        temperature=0,
        extra_body={"prompt_logprobs": 0, "add_generation_prompt": False, "return_token_ids": True},
    )
    expected = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]
    assert answer.model_extra["prompt_token_ids"] == expected
    entries = answer.model_extra["prompt_logprobs"]
    assert entries[0] is None and len(entries) == len(expected)
    assert all(str(token) in entry for entry, token in zip(entries[1:], expected[1:]))


def test_n_samples_with_a_seed_are_seed_plus_index(client, vllm_server):
    def sample(n: int, seed: int) -> list[str]:
        answer = client.chat.completions.create(
            model=vllm_server.model,
            n=n,
            seed=seed,
            max_tokens=4,
            temperature=1.0,
            messages=[{"role": "user", "content": "Say a word."}],
        )
        return [choice.message.content for choice in sorted(answer.choices, key=lambda c: c.index)]

    three = sample(3, 7)
    assert len(three) == 3 and len(set(three)) == 3
    assert sample(3, 7) == three
    assert [sample(1, 7 + i)[0] for i in range(3)] == three


def test_unknown_model_is_a_404_naming_the_served_ones(client, vllm_server):
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="no-such-model", messages=PAIRWISE, max_tokens=1)
    assert caught.value.status_code == 404
    assert caught.value.body == {
        "message": "The model `no-such-model` does not exist. "
        f"Valid aliases: {vllm_server.model}, {vllm_server.second}.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }


def test_over_long_prompt_is_a_400_with_the_servers_reason(client, vllm_server):
    limit = vllm_server.max_model_len
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=vllm_server.model, prompt=[1] * (limit + 1), max_tokens=1)
    assert caught.value.status_code == 400
    assert caught.value.body["message"].startswith(
        f"This model's maximum context length is {limit} tokens. However, your prompt contains at least "
        f"{limit + 1} input tokens"
    )
    # A prompt that fits but leaves fewer than max_tokens is answered, its output cut at the limit.
    answer = client.completions.create(
        model=vllm_server.model,
        prompt=[1] * (limit - 4),
        max_tokens=100,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert answer.usage.prompt_tokens + answer.usage.completion_tokens == limit
    assert answer.choices[0].finish_reason == "length"
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=vllm_server.model, messages=PAIRWISE, max_tokens=limit + 1)
    assert caught.value.body["param"] == "max_tokens"
