"""The `openai` engine: any OpenAI-compatible server, through the official client's async API.

One event loop runs on a thread of the engine's own, so the engine's calls are plain
functions that any caller (a command, a worker thread of `preflab serve`) can make. Each
call's asks go out at most `concurrency` at a time, each to the server with the fewest in
flight; one that stops answering while another answers is left out (`routes`). Before
asking anything, what was asked before is read from the request store
(`preflab.db.requests`); each answer is handed to the store's writer as it arrives, and a
call returns once its answers are committed.

The client retries a 429, a 5xx, a timeout and a dropped connection itself (backoff with
jitter, honouring Retry-After); the retries it took are counted from its raw response.
An answer that is no JSON is asked again here, as a retry too. What cannot go on stops the
call with one sentence (`EngineError`): a key the server refuses, a model it does not have
(with the ones it has), no server that answers. An item over the context length is
`Failed(quarantined=True)` and the rest go on.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from sqlalchemy.orm import Session, sessionmaker

from preflab.db.requests import OK, QUARANTINED, AnswerWriter, request_key, request_row, stored_answers
from preflab.errors import EngineError
from preflab.lm.engines import wire
from preflab.lm.engines.base import Engine
from preflab.lm.engines.calls import Failed, Generate, Generation, Likelihood, Logprobs, ReplyLogprob, TokenLogprobs
from preflab.lm.engines.config import EngineConfig, EngineStats
from preflab.lm.engines.routes import Lost, Route, Routes

T = TypeVar("T")
CHECK_RETRIES = 1  # the first look at a server: one that does not answer is named at once, not after a minute


def served_label(model: str) -> str:
    """What a served model is recorded as (candidates' model, a judge's annotator): `openai:<served name>`."""
    return f"openai:{model}"


class OpenAIEngine(Engine):
    """Generation and judging on OpenAI-compatible servers: see `preflab.lm.engines`."""

    prefix_ordering = True
    stores_answers = True

    def __init__(self, config: EngineConfig, sessions: sessionmaker[Session], *, record=True, commit_every=0.5):
        from openai import AsyncOpenAI

        self.config = config
        self.model = config.model or ""
        self.name = served_label(self.model)
        self.concurrency, self.currency = config.concurrency, config.currency
        self.stats = EngineStats("openai", self.model, price_in=config.price_in, price_out=config.price_out)
        self._record, self._version_id, self._sessions = record, None, sessions
        self._writer = AnswerWriter(sessions, every=commit_every)
        # A local server started without --api-key takes any key; the client insists on one.
        key = os.environ.get("OPENAI_API_KEY") or "none"
        self._routes = Routes(
            [
                Route(
                    url, AsyncOpenAI(base_url=url, api_key=key, timeout=config.timeout, max_retries=config.max_retries)
                )
                for url in config.urls()
            ],
            self.stats,
        )
        self._server: wire.Server | None = None
        self._likelihood: str | None = None  # chat (vLLM's prompt_logprobs) or echo (completions)
        self._template = None  # the tokenizer whose chat template the echo path renders with
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="preflab-engine", daemon=True)
        self._thread.start()

    @property
    def version_id(self) -> int | None:
        """The model version the served model is recorded as, under its name here (recorded on first use)."""
        if self._record and self._version_id is None:
            from preflab.lm.names import model_version_id

            with self._sessions.begin() as session:
                self._version_id = model_version_id(session, self.name)
        return self._version_id

    # --- the calls -----------------------------------------------------------------------------------------

    def generate(self, asks: Sequence[Generate]) -> list[Generation | Failed]:
        """One sampled reply per ask, in order."""
        server = self.server()
        bodies = [wire.generate_body(self.model, ask, server) for ask in asks]
        return [a if isinstance(a, Failed) else wire.read_generation(a) for a in self._ask(wire.CHAT, bodies)]

    def top_logprobs(self, asks: Sequence[Logprobs]) -> list[TokenLogprobs | Failed]:
        """The first tokens of each greedy reply with their alternatives, in order."""
        server = self.server()
        bodies = [wire.logprobs_body(self.model, ask, server) for ask in asks]
        return [a if isinstance(a, Failed) else wire.read_logprobs(a) for a in self._ask(wire.CHAT, bodies)]

    def likelihood(self, asks: Sequence[Likelihood]) -> list[ReplyLogprob | Failed]:
        """log p of each reply's tokens after its conversation, in order: the tokens `preflab.lm.replies` names."""
        mode = self.check_likelihood()
        if mode == "chat":
            # Each conversation's own token ids first (once for all its replies), so that the replies, asked next,
            # find it in a prefix cache.
            contexts = self._ask(wire.CHAT, [wire.likelihood_context_body(self.model, ask) for ask in asks])
            answers = self._ask(wire.CHAT, [wire.likelihood_chat_body(self.model, ask) for ask in asks])
            return [
                a if isinstance(a, Failed) else c if isinstance(c, Failed) else wire.read_likelihood_chat(a, c)
                for a, c in zip(answers, contexts)
            ]
        from preflab.lm.replies import rendered

        texts = [rendered(self._template, ask.prompt, ask.reply) for ask in asks]
        answers = self._ask(wire.COMPLETIONS, [wire.likelihood_echo_body(self.model, whole) for _, whole in texts])
        return [
            a if isinstance(a, Failed) else wire.read_likelihood_echo(a, context, whole)
            for a, (context, whole) in zip(answers, texts)
        ]

    # --- what the server offers ----------------------------------------------------------------------------

    def check(self) -> None:
        """Look at the servers (their /v1/models) before anything is paid for."""
        self.server()

    def offers_json(self) -> bool:
        return self.server().holds_json

    def server(self) -> wire.Server:
        """What the servers offer, looked up once (their /v1/models): a bad key, a wrong model or no
        server that answers stops here, before anything is paid for (one of several that does not answer
        is left out, and the run goes on with the others)."""
        if self._server is None:
            self._server = self._run(self._check())
        return self._server

    def check_likelihood(self) -> str:
        """How this server gives prompt log-probabilities ("chat" or "echo"), probed with one token.

        Raises:
            EngineError: it gives them neither way (before any paid request).
        """
        if self._likelihood is None:
            self.server()
            if wire.offers_prompt_logprobs(self._probe(wire.CHAT, wire.prompt_logprobs_probe(self.model))):
                self._likelihood = "chat"
            elif wire.offers_echo(self._probe(wire.COMPLETIONS, wire.echo_probe(self.model))):
                self._template = self._echo_template()
                self._likelihood = "echo"
            else:
                raise EngineError(
                    f"the server at {self._routes.first.url} gives no prompt log-probabilities (neither "
                    f"vLLM's prompt_logprobs nor completions with echo and logprobs), which the "
                    f"likelihood judge reads: serve {self.model!r} with vLLM, or use another judge"
                )
        return self._likelihood

    def _echo_template(self):
        from preflab.lm.loading import load_tokenizer

        try:
            return load_tokenizer(self.model)
        except Exception as exc:  # any failure to find it is the same advice
            raise EngineError(
                f"the server at {self._routes.first.url} scores prompts only on completions, which "
                f"need {self.model!r}'s chat template here, and its tokenizer could not be loaded "
                f"({type(exc).__name__}): serve the model under its hub id or path"
            ) from None

    def _probe(self, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
        import openai

        async def probe() -> dict[str, Any]:
            route = self._routes.first
            try:
                raw = await route.create(endpoint)(**body)
                answer = json.loads(raw.text)
            except (openai.BadRequestError, openai.NotFoundError, openai.UnprocessableEntityError, ValueError):
                return {}  # the server does not offer the endpoint or the parameter
            except openai.APIError as exc:
                raise self._fatal(route, exc) from None
            self._count(answer, raw.retries_taken)
            return answer if isinstance(answer, dict) else {}

        return self._run(probe())

    async def _check(self) -> wire.Server:
        import openai

        server = wire.Server.at([r.url for r in self._routes])
        silent: list[tuple[Route, Exception]] = []
        for route in self._routes:
            try:
                listed = await route.client.with_options(max_retries=CHECK_RETRIES).models.list()
            except openai.NotFoundError:
                continue  # no /v1/models here: the first request will say whether the model exists
            except openai.APIConnectionError as exc:
                silent.append((route, exc))
                continue
            except openai.APIError as exc:
                raise self._fatal(route, exc) from None
            server.models += (ids := tuple(m.id for m in listed.data))
            server.vllm = server.vllm or any(getattr(m, "owned_by", None) == "vllm" for m in listed.data)
            if ids and self.model not in ids:
                raise EngineError(
                    f"the server at {route.url} has no model {self.model!r}; it offers: {', '.join(ids[:20])}"
                )
        if len(silent) == len(self._routes.all):  # none answers: stop before anything is asked
            raise self._fatal(*silent[0])
        for route, exc in silent:  # a server down while others answer: the run goes on without it
            self._routes.lose(route, exc)
        return server

    # --- asking --------------------------------------------------------------------------------------------

    def _ask(self, endpoint: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any] | Failed]:
        """The answers to `bodies`, each from the store where it was asked before, else from a server."""
        start = time.perf_counter()
        keys = [request_key(endpoint, self.model, body) for body in bodies]
        with self._sessions.begin() as session:
            found = {key: _stored(row) for key, row in stored_answers(session, keys).items()}
        self.stats.cache_hits += sum(1 for key in keys if key in found)
        wanted = {key: body for key, body in zip(keys, bodies) if key not in found}
        try:
            found.update(self._run(self._send_all(endpoint, wanted)))
        finally:
            self._writer.flush()
            self.stats.seconds += time.perf_counter() - start
        return [found[key] for key in keys]

    async def _send_all(self, endpoint: str, wanted: dict[str, dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if not wanted:
            return out
        gate = asyncio.Semaphore(self.config.concurrency)

        async def one(key: str, body: dict[str, Any]) -> None:
            async with gate:
                out[key] = await self._send(endpoint, key, body)

        tasks = [asyncio.ensure_future(one(key, body)) for key, body in wanted.items()]
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in pending:  # one failure that stops the run: ask nothing more
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in done:
            if task.exception() is not None:
                raise task.exception()
        return out

    async def _send(self, endpoint: str, key: str, body: dict[str, Any]) -> dict[str, Any] | Failed:
        while True:
            route = self._routes.pick()
            route.in_flight += 1
            try:
                return await self._send_to(route, endpoint, key, body)
            except Lost:
                continue  # asked again of a server that still answers
            finally:
                route.in_flight -= 1

    async def _send_to(self, route: Route, endpoint: str, key: str, body: dict[str, Any]) -> dict[str, Any] | Failed:
        import openai

        for attempt in range(self.config.max_retries + 1):
            try:
                raw = await route.create(endpoint)(**body)
            except openai.APITimeoutError:
                return self._failed(
                    f"no answer from {route.url} within {self.config.timeout:g} s", self.config.max_retries
                )
            except openai.BadRequestError as exc:
                reason = wire.context_length_reason(exc.status_code, exc.body, exc.message)
                if reason is None:
                    raise self._fatal(route, exc) from None
                self._writer.put(request_row(key, endpoint, self.model, body, exc.body, QUARANTINED, reason))
                self.stats.quarantined += 1
                return Failed(reason, quarantined=True)
            except openai.APIStatusError as exc:
                if exc.status_code in (408, 409, 429) or exc.status_code >= 500:
                    return self._failed(
                        f"{route.url} answered {exc.status_code} after every retry: {wire.reason(exc)}",
                        self.config.max_retries,
                    )
                raise self._fatal(route, exc) from None
            except openai.APIConnectionError as exc:  # after the client's own retries: the server is gone
                if self._routes.lose(route, exc):
                    raise Lost from None
                raise self._fatal(route, exc) from None
            except openai.APIError as exc:
                raise self._fatal(route, exc) from None
            self.stats.retries += raw.retries_taken
            try:
                answer = json.loads(raw.text)
                if not isinstance(answer, dict) or not answer.get("choices"):
                    raise ValueError("no choices")
            except ValueError:  # an answer cut short or garbled: asked again, as the client does a 5xx
                if attempt < self.config.max_retries:
                    self.stats.retries += 1
                    await asyncio.sleep(min(0.5 * 2**attempt, 8.0) * (1 - 0.25 * random.random()))
                continue
            tokens_in, tokens_out = self._count(answer, 0)
            self._writer.put(request_row(key, endpoint, self.model, body, answer, OK, None, tokens_in, tokens_out))
            return answer
        return self._failed(f"{route.url} answered with no readable JSON {self.config.max_retries + 1} times", 0)

    def _count(self, answer: dict[str, Any], retries: int) -> tuple[int, int]:
        tokens_in, tokens_out = wire.usage(answer)
        self.stats.requests += 1
        self.stats.retries += retries
        self.stats.tokens_in += tokens_in
        self.stats.tokens_out += tokens_out
        return tokens_in, tokens_out

    def _failed(self, reason: str, retries: int) -> Failed:
        self.stats.errors += 1
        self.stats.retries += retries
        return Failed(reason)

    def _fatal(self, route: Route, exc: Exception) -> EngineError:
        """The one sentence for an error the run cannot go past."""
        import openai

        if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
            return EngineError(
                f"the server at {route.url} refused the key ({exc.status_code}): set OPENAI_API_KEY to a key it accepts"
            )
        if isinstance(exc, openai.NotFoundError):
            offered = ", ".join((self._server.models if self._server else ())[:20]) or "none listed"
            return EngineError(
                f"the server at {route.url} has no model {self.model!r} ({wire.reason(exc)}); it offers: {offered}"
            )
        if isinstance(exc, openai.APIStatusError):
            return EngineError(f"the server at {route.url} refused a request ({exc.status_code}): {wire.reason(exc)}")
        return EngineError(f"the server at {route.url} does not answer ({wire.reason(exc)}): is it running there?")

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result()
        except BaseException:  # Ctrl-C here stops the asks in flight too
            future.cancel()
            raise

    def close(self) -> None:
        """Commit what is held, close the connections and stop the loop's thread."""
        if self._loop.is_closed():
            return
        try:
            self._writer.close()
        finally:

            async def shut() -> None:
                for route in self._routes:
                    await route.client.close()

            self._run(shut())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()


def _stored(row) -> dict[str, Any] | Failed:
    return row.answer if row.status == OK else Failed(row.reason or "quarantined", quarantined=True)
