"""What is sent to an OpenAI-compatible server for each call, and how its answer is read.

Bodies are the keyword arguments of the official client's `create` (vLLM's own
parameters under `extra_body`, with the names vLLM 0.32 reads: `structured_outputs`,
`prompt_logprobs`, `return_token_ids`, `continue_final_message`, `add_generation_prompt`). A body is also
what the request store hashes and keeps, so everything that changes the answer is in it.
Answers are read from the JSON as received (the store holds that JSON), never from the
client's typed objects: a cached answer and a fresh one are read by the same code.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from preflab.lm.engines.calls import (
    Generate,
    Generation,
    Likelihood,
    Logprobs,
    ReplyLogprob,
    TokenLogprobs,
    as_messages,
)
from preflab.lm.replies import reply_start

CHAT = "chat.completions"
COMPLETIONS = "completions"
# A hosted API holds a verdict to its choices through a JSON schema: the verdict is then a few tokens in.
JSON_VERDICT_TOKENS = 12


@dataclass
class Server:
    """What a server offers, as far as the calls here need to know."""

    vllm: bool = False  # vLLM's own parameters are understood (its /v1/models says owned_by "vllm")
    json_schema: bool = False  # OpenAI's response_format json_schema (a hosted API)
    models: tuple[str, ...] = ()

    @classmethod
    def at(cls, urls: list[str]) -> Server:
        """What is known of servers at these URLs before asking them: OpenAI's own API takes a JSON schema."""
        return cls(json_schema=all(urlsplit(url).hostname == "api.openai.com" for url in urls))

    @property
    def holds_json(self) -> bool:
        """A reply can be held to a JSON schema: vLLM's structured output, a hosted API's `response_format`."""
        return self.vllm or self.json_schema


def sample_seed(seed: int, index: int) -> int:
    """The seed a server samples `index`'s reply with: distinct for every (seed, index)."""
    digest = hashlib.sha256(f"{seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def generate_body(model: str, ask: Generate, server: Server | None = None) -> dict[str, Any]:
    """A sampled reply's body; one held to `ask.schema` where the server offers it (vLLM, a hosted API)."""
    s = ask.sampling
    body: dict[str, Any] = {
        "model": model,
        "messages": as_messages(ask.prompt),
        "max_tokens": s.max_tokens,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "seed": sample_seed(s.seed, ask.index),
    }
    if ask.schema is not None and server is not None and server.vllm:
        body["extra_body"] = {"structured_outputs": {"json": ask.schema}}
    elif ask.schema is not None and server is not None and server.json_schema:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "answer", "strict": True, "schema": ask.schema},
        }
    return body


def read_generation(answer: dict[str, Any]) -> Generation:
    choice = answer["choices"][0]
    text = (choice.get("message") or {}).get("content") or ""
    tokens = int((answer.get("usage") or {}).get("completion_tokens") or 0)
    # NUL cannot be stored in a Postgres text column (as in process: preflab.lm.sampling).
    return Generation(text.replace("\x00", "").strip(), tokens, choice.get("finish_reason") == "stop")


def logprobs_body(model: str, ask: Logprobs, server: Server) -> dict[str, Any]:
    messages = as_messages(ask.prompt)
    body: dict[str, Any] = {
        "model": model,
        "temperature": 0.0,
        "logprobs": True,
        "top_logprobs": ask.top_logprobs,
        "max_tokens": ask.max_tokens,
    }
    extra: dict[str, Any] = {}
    if ask.answer_start and server.vllm:
        messages = [*messages, {"role": "assistant", "content": ask.answer_start}]
        extra.update(continue_final_message=True, add_generation_prompt=False)
    elif ask.answer_start:
        # No server-side prefill elsewhere: the model writes the start itself, and the reader
        # finds the choice token further in (TokenLogprobs.choice_logprobs).
        body["max_tokens"] = ask.max_tokens + JSON_VERDICT_TOKENS
    if ask.choices and server.vllm:
        extra["structured_outputs"] = {"choice": list(ask.choices)}
    elif ask.choices and server.json_schema:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": "verdict",
                "strict": True,
                "schema": {
                    "type": "object",
                    "properties": {"verdict": {"type": "string", "enum": list(ask.choices)}},
                    "required": ["verdict"],
                    "additionalProperties": False,
                },
            },
        }
        body["max_tokens"] = max(body["max_tokens"], JSON_VERDICT_TOKENS)
    body["messages"] = messages
    if extra:
        body["extra_body"] = extra
    return body


def read_logprobs(answer: dict[str, Any]) -> TokenLogprobs:
    """The reply's tokens and their alternatives; a reply without log-probabilities reads as none."""
    choice = answer["choices"][0]
    text = (choice.get("message") or {}).get("content") or ""
    content = (choice.get("logprobs") or {}).get("content") or []
    tokens = [item.get("token", "") for item in content]
    top = []
    for item in content:
        alternatives = {alt["token"]: float(alt["logprob"]) for alt in item.get("top_logprobs") or []}
        alternatives.setdefault(item.get("token", ""), float(item.get("logprob", float("-inf"))))
        top.append(alternatives)
    return TokenLogprobs(text, tokens, top)


def likelihood_context_body(model: str, ask: Likelihood) -> dict[str, Any]:
    """vLLM: the conversation up to the reply, for its token ids (where the reply's tokens begin).

    The same for every reply to one conversation, so it is asked (and stored) once for them all;
    it generates one token, the least a chat request does.
    """
    return {
        "model": model,
        "messages": as_messages(ask.prompt),
        "max_tokens": 1,
        "temperature": 0.0,
        "extra_body": {"return_token_ids": True},
    }


def likelihood_chat_body(model: str, ask: Likelihood) -> dict[str, Any]:
    """vLLM: the conversation with the reply as its open last turn; the prompt's log-probabilities come back."""
    messages = [*as_messages(ask.prompt), {"role": "assistant", "content": ask.reply}]
    return {
        "model": model,
        "messages": messages,
        "max_tokens": 1,
        "temperature": 0.0,
        "extra_body": {
            "prompt_logprobs": 0,
            "continue_final_message": True,
            "add_generation_prompt": False,
            "return_token_ids": True,
        },
    }


def read_likelihood_chat(answer: dict[str, Any], context: dict[str, Any]) -> ReplyLogprob:
    """The reply's tokens are the prompt's after those it shares with its conversation's (`context`'s answer).

    Read by token id, as `preflab.lm.replies` splits them in process, never by spelling the
    reply out of decoded pieces: an emoji's byte tokens decode to nothing until its last.
    """
    ids = answer.get("prompt_token_ids") or []
    positions = answer.get("prompt_logprobs") or []
    start = max(reply_start(context.get("prompt_token_ids") or [], ids), 1)  # the first token has no log-probability
    total = 0.0
    for token, position in zip(ids[start:], positions[start:]):
        entry = position.get(str(token)) or next(iter(position.values()))  # prompt_logprobs=0: the token's own
        total += float(entry["logprob"])
    return ReplyLogprob(total, max(len(ids) - start, 0))


def likelihood_echo_body(model: str, whole: str) -> dict[str, Any]:
    """Completions with `echo`: the templated conversation, the reply its open last turn, scored token by token."""
    return {"model": model, "prompt": whole, "max_tokens": 1, "temperature": 0.0, "echo": True, "logprobs": 1}


def read_likelihood_echo(answer: dict[str, Any], context: str, whole: str) -> ReplyLogprob:
    """The prompt's tokens from where `whole` leaves `context`: those that start there or later, or end after it
    (one merged across the seam), as `preflab.lm.replies` splits them by token."""
    logprobs = answer["choices"][0].get("logprobs") or {}
    offsets = logprobs.get("text_offset") or []
    # The prompt's tokens come first, then the one generated (its offset is not always the prompt's length: vLLM
    # spells a prompt ending in a character's byte pieces short).
    prompt = int((answer.get("usage") or {}).get("prompt_tokens") or len(offsets))
    seam = reply_start(context, whole)  # characters, here
    ends = [*offsets[1:prompt], len(whole)]
    total, tokens = 0.0, 0
    for offset, end, value in zip(offsets[:prompt], ends, logprobs.get("token_logprobs") or []):
        if (offset >= seam or end > seam) and value is not None:
            total += float(value)
            tokens += 1
    return ReplyLogprob(total, tokens)


# --- what the server offers for prompt log-probabilities: probed with one token, before any paid request -------

PROBE_MESSAGES = [{"role": "user", "content": "Hi"}]


def prompt_logprobs_probe(model: str) -> dict[str, Any]:
    return {
        "model": model,
        "messages": PROBE_MESSAGES,
        "max_tokens": 1,
        "temperature": 0.0,
        "extra_body": {"prompt_logprobs": 0, "return_token_ids": True},
    }


def offers_prompt_logprobs(answer: dict[str, Any]) -> bool:
    # A server that does not know a parameter ignores it (vLLM logs it; others drop it): nothing comes back.
    # The prompt's token ids (vLLM's return_token_ids) tell where a reply's tokens begin.
    return bool(answer.get("prompt_logprobs")) and bool(answer.get("prompt_token_ids"))


def echo_probe(model: str) -> dict[str, Any]:
    return {"model": model, "prompt": "Hello there", "max_tokens": 1, "temperature": 0.0, "echo": True, "logprobs": 1}


def offers_echo(answer: dict[str, Any]) -> bool:
    choices = answer.get("choices") or [{}]
    logprobs = choices[0].get("logprobs") or {}
    # The prompt's tokens and the generated one: more than one token, with their offsets.
    return len(logprobs.get("token_logprobs") or []) > 1 and bool(logprobs.get("text_offset"))


def usage(answer: dict[str, Any]) -> tuple[int, int]:
    used = answer.get("usage") or {}
    return int(used.get("prompt_tokens") or 0), int(used.get("completion_tokens") or 0)


def context_length_reason(status: int, body: Any, message: str) -> str | None:
    """The server's reason when a 400 says the item is over the model's context length, else None."""
    error = body.get("error", body) if isinstance(body, dict) else {}
    reason = (error.get("message") if isinstance(error, dict) else None) or message
    code = error.get("code") if isinstance(error, dict) else None
    text = str(reason).lower()
    if status == 400 and (
        code == "context_length_exceeded"
        or "context length" in text
        or "maximum context" in text
        or "too many tokens" in text
    ):
        return str(reason)
    return None


def reason(exc: Exception) -> str:
    """What went wrong, in the server's words where its error body has them (the client's otherwise)."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    cause = exc.__cause__ or exc.__context__
    return str(getattr(exc, "message", None) or exc) + (f" ({type(cause).__name__})" if cause else "")
