"""A small OpenAI-compatible server that misbehaves on demand, for the engine's tests and bench.

It answers `/v1/chat/completions`, `/v1/completions` and `/v1/models` in the shapes vLLM 0.32
gives (`prompt_logprobs` and `prompt_token_ids` at the top of a chat answer, `structured_outputs` choices honoured,
the error bodies of vLLM's `create_error_response`), deterministically: the same request
gets the same answer. It is a fake at the one boundary a test cannot make fail on purpose,
the network and the server; the real vLLM server is tested elsewhere.

Faults, set on `app.state.faults` (a `Faults`): `plan` is a queue of faults the next
requests meet, one each ("429" with Retry-After, "500", "slow", "broken", "drop"), and
`always` a fault every request meets; `key` makes every request without that bearer key a
401; a model other than `model` is a 404 (vLLM's words); a prompt longer than
`max_context` characters is vLLM's context-length 400. It counts what it was asked.

    url, faults, stop = serve(make_app(Faults(delay=0.2)))
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import socket
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

TOKEN = re.compile(r"\s+|\S+")


@dataclass
class Faults:
    model: str = "fault-model"
    owned_by: str = "vllm"
    delay: float = 0.0  # seconds before each answer
    slow: float = 5.0  # seconds a "slow" answer takes
    retry_after: str = "1"
    key: str | None = None
    max_context: int = 10_000  # characters of prompt
    prompt_logprobs: bool = True  # vLLM's prompt_logprobs on chat
    echo: bool = True  # completions with echo + logprobs
    plan: deque = field(default_factory=deque)
    always: str | None = None
    asked: Counter = field(default_factory=Counter)  # path -> requests received
    bodies: Counter = field(default_factory=Counter)  # the request body (as JSON) -> times received
    served: Counter = field(default_factory=Counter)  # the request body (as JSON) -> times answered 200
    in_flight: int = 0
    peak: int = 0
    held: bool = False  # while True, every answer waits (after its delay) until it is set False again
    hold_after: int | None = None  # answers given before `held` is set, by the app itself (no race with a test)
    holding: int = 0  # answers waiting now

    def next_fault(self) -> str | None:
        return self.plan.popleft() if self.plan else self.always

    def answered(self, path: str) -> int:
        return self.asked[path]


def _error(status: int, message: str, kind: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": status}},
        status_code=status,
        headers=headers,
    )


def _digest(value) -> int:
    return int.from_bytes(hashlib.sha256(json.dumps(value, sort_keys=True).encode()).digest()[:4], "big")


def rendered(messages: list[dict], body: dict) -> str:
    """The fake chat template: each message as `<|role|>\\ncontent\\n`, a continued last one left open."""
    extra = body.get("extra_body") or {}
    cont = body.get("continue_final_message", extra.get("continue_final_message"))
    parts = [f"<|{m['role']}|>\n{m['content']}\n" for m in messages]
    if cont:
        parts[-1] = parts[-1][:-1]
    elif body.get("add_generation_prompt", True):
        parts.append("<|assistant|>\n")
    return "".join(parts)


def token_id(token: str) -> int:
    """A token's id: the same text, the same id."""
    return _digest(token)


def token_logprob(token: str) -> float:
    """Each token's log-probability: -0.1 per character (what the likelihood tests compute back)."""
    return -0.1 * len(token)


def make_app(faults: Faults) -> FastAPI:
    app = FastAPI()
    app.state.faults = faults

    async def guard(request: Request, path: str):
        f = faults
        f.asked[path] += 1
        if f.key is not None and request.headers.get("authorization") != f"Bearer {f.key}":
            return None, _error(401, "Incorrect API key provided.", "AuthenticationError")
        if path == "models":
            return None, None
        raw = await request.body()
        body = json.loads(raw)
        f.bodies[json.dumps(body, sort_keys=True)] += 1
        if body.get("model") != f.model:
            return body, _error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
        return body, None

    async def faulted(fault: str | None):
        if fault == "429":
            return _error(429, "Rate limit reached.", "RateLimitError", {"retry-after": faults.retry_after})
        if fault == "500":
            return _error(500, "Internal server error.", "InternalServerError")
        if fault == "slow":
            await asyncio.sleep(faults.slow)
        if fault == "broken":
            return Response('{"id": "cmpl-1", "choices": [{"message": {"content": "cut', media_type="application/json")
        return None

    @app.get("/v1/models")
    async def models(request: Request):
        _, refused = await guard(request, "models")
        if refused is not None:
            return refused
        return {
            "object": "list",
            "data": [
                {
                    "id": faults.model,
                    "object": "model",
                    "owned_by": faults.owned_by,
                    "max_model_len": faults.max_context,
                }
            ],
        }

    @app.post("/v1/chat/completions")
    @app.post("/v1/completions")
    async def completions(request: Request):
        path = "chat" if request.url.path.endswith("/chat/completions") else "completions"
        body, refused = await guard(request, path)
        if refused is not None:
            return refused
        return await answer(body, path)

    async def answer(body: dict, path: str):
        f = faults
        f.in_flight += 1
        f.peak = max(f.peak, f.in_flight)
        try:
            if f.delay:
                await asyncio.sleep(f.delay)
            if f.hold_after is not None and sum(f.served.values()) >= f.hold_after:
                f.held, f.hold_after = True, None
            if f.held:
                f.holding += 1
                while f.held:
                    await asyncio.sleep(0.01)
                f.holding -= 1
            fault = f.next_fault()
            if fault == "drop":
                return DROP
            bad = await faulted(fault)
            if bad is not None:
                return bad
            prompt = rendered(body["messages"], body) if path == "chat" else body["prompt"]
            if len(prompt) > f.max_context:
                return _error(
                    400,
                    f"This model's maximum context length is {f.max_context} tokens. However, your "
                    f"request has {len(prompt)} input tokens. Please reduce the length of the "
                    f"input messages.",
                    "BadRequestError",
                )
            out = chat_answer(body, prompt, f) if path == "chat" else completion_answer(body, prompt, f)
            f.served[json.dumps(body, sort_keys=True)] += 1
            return out
        finally:
            f.in_flight -= 1

    return app


class _Drop(Response):
    """A response that promises a body and closes the connection after a part of it: a dropped connection."""

    async def __call__(self, scope, receive, send):
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"1000")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"id": ', "more_body": False})


DROP = _Drop()


def chat_answer(body: dict, prompt: str, faults: Faults) -> dict:
    tokens = TOKEN.findall(prompt)
    choices = (body.get("structured_outputs") or {}).get("choice") or (
        (body.get("extra_body") or {}).get("structured_outputs") or {}
    ).get("choice")
    schema = (
        (body.get("structured_outputs") or {}) or ((body.get("extra_body") or {}).get("structured_outputs") or {})
    ).get("json")
    seed = body.get("seed")
    n = _digest([prompt, seed, body.get("temperature")])
    if choices:
        words = [choices[n % len(choices)]]
    elif schema:  # a JSON object of the schema's integer properties, each drawn within its bounds
        props = schema.get("properties") or {}
        drawn = {
            name: spec.get("minimum", 0)
            + _digest([prompt, seed, name]) % (spec.get("maximum", 9) - spec.get("minimum", 0) + 1)
            for name, spec in props.items()
        }
        words = [json.dumps(drawn)]
    else:
        words = [f"word{(n >> k) % 7}" for k in range(min(int(body.get("max_tokens") or 16), 8))]
    reply = " ".join(words)
    out = {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply},
                "finish_reason": "stop" if len(words) < int(body.get("max_tokens") or 16) else "length",
            }
        ],
        "usage": {
            "prompt_tokens": len(tokens),
            "completion_tokens": len(words),
            "total_tokens": len(tokens) + len(words),
        },
    }
    if body.get("logprobs"):
        k = int(body.get("top_logprobs") or 0)
        alternatives = choices or ["A", "B", "C"]
        content = []
        for i, word in enumerate(words):
            token = word if i == 0 else " " + word
            top = [{"token": token, "logprob": -0.25}] + [
                {"token": alt, "logprob": -1.5 - j} for j, alt in enumerate(a for a in alternatives if a != word)
            ]
            content.append({"token": token, "logprob": -0.25, "top_logprobs": top[:k]})
        out["choices"][0]["logprobs"] = {"content": content}
    extra = body.get("extra_body") or {}
    asked = body.get("prompt_logprobs", extra.get("prompt_logprobs"))
    if asked is not None and faults.prompt_logprobs:
        out["prompt_logprobs"] = [None] + [
            {str(token_id(t)): {"logprob": token_logprob(t), "rank": 1, "decoded_token": t}} for t in tokens[1:]
        ]
    if body.get("return_token_ids", extra.get("return_token_ids")) and faults.prompt_logprobs:
        out["prompt_token_ids"] = [token_id(t) for t in tokens]  # vLLM's return_token_ids, beside prompt_logprobs
    return out


def completion_answer(body: dict, prompt: str, faults: Faults) -> dict:
    tokens = TOKEN.findall(prompt)
    generated = " next"
    out = {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 0,
        "model": body["model"],
        "choices": [
            {
                "index": 0,
                "text": (prompt if body.get("echo") else "") + generated,
                "finish_reason": "length",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": len(tokens), "completion_tokens": 1, "total_tokens": len(tokens) + 1},
    }
    if body.get("echo") and body.get("logprobs") is not None and faults.echo:
        offsets, at = [], 0
        for t in [*tokens, generated]:
            offsets.append(at)
            at += len(t)
        out["choices"][0]["logprobs"] = {
            "tokens": [*tokens, generated],
            "text_offset": offsets,
            "token_logprobs": [None] + [token_logprob(t) for t in tokens[1:]] + [-0.5],
            "top_logprobs": None,
        }
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(faults: Faults, port: int | None = None):
    """Start the app on a loopback port in a thread: (base URL ending in /v1, faults, stop)."""
    import uvicorn

    port = port or free_port()
    server = uvicorn.Server(
        uvicorn.Config(make_app(faults), host="127.0.0.1", port=port, log_level="critical", access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the fault app did not start")
        time.sleep(0.01)

    def stop() -> None:
        server.should_exit = True
        thread.join(10)

    return f"http://127.0.0.1:{port}/v1", faults, stop


def main() -> None:
    """`python tests/fault_app.py PORT DELAY`: the app in a process of its own (the bench's stub)."""
    import sys

    import uvicorn

    faults = Faults(delay=float(sys.argv[2]) if len(sys.argv) > 2 else 0.0)
    uvicorn.run(make_app(faults), host="127.0.0.1", port=int(sys.argv[1]), log_level="critical", access_log=False)


if __name__ == "__main__":
    main()
