"""The `transformers` engine: the same three calls on a model in this process.

The model is one already loaded (a `NamedModel` with its weights), or one named: resolved
(`preflab.lm.names.resolve_model`) when its name is first needed and loaded (through the job's
`ModelCache`) when first asked something, so opening the engine costs nothing.

Generation is `preflab.lm.sampling.generate_texts` over each prompt in the model's chat format
(`preflab.lm.loading.chat_prompt`, a reply's begun start after it), the asks that share their
sampling in one `generate` per batch. A verdict held to its choices is read from one forward
pass, the shared prefix run once (`preflab.lm.forward.choice_logprobs`); one without choices is a
greedy `generate` that keeps each step's logits. A reply's likelihood is one teacher-forced forward
pass over the conversation with the reply as its open last turn, scored on the tokens a server
scores (`preflab.lm.replies`). Nothing is stored: asking again costs nothing but time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from sqlalchemy.orm import Session, sessionmaker

from preflab.db.store import chunks
from preflab.lm.engines.base import Engine
from preflab.lm.engines.calls import Generate, Generation, Likelihood, Logprobs, ReplyLogprob, TokenLogprobs
from preflab.lm.engines.config import EngineStats
from preflab.lm.names import ModelCache, NamedModel


class TransformersEngine(Engine):
    """A causal LM in this process (open it with `preflab.lm.engines.open_engine`)."""

    sample_logprobs = True
    samples_top_k = True

    def __init__(
        self,
        model: str | NamedModel,
        sessions: sessionmaker[Session] | None = None,
        *,
        cache: ModelCache | None = None,
        record: bool = True,
        batch_size: int = 8,
    ):
        self._named = model if isinstance(model, NamedModel) else None
        self._wanted, self._sessions, self._record = model, sessions, record
        self._cache = cache or ModelCache()
        self.batch_size = batch_size
        self._stats: EngineStats | None = None

    # --- the model ----------------------------------------------------------------------------------------

    def _resolved(self) -> NamedModel:
        if self._named is None:
            from preflab.lm.names import resolve_model

            if self._sessions is None:
                raise ValueError(f"the model {self._wanted!r} is named, not loaded: open its engine with the store")
            with self._sessions.begin() as session:
                label, location, version_id = resolve_model(session, self._wanted, record=self._record)
            self._named = NamedModel(label, location, version_id, None, None)
        return self._named

    def _loaded(self) -> NamedModel:
        named = self._resolved()
        if named.model is None:
            model, tokenizer = self._cache.get(named.location)
            self._named = named = replace(named, model=model, tokenizer=tokenizer)
        return named

    @property
    def name(self) -> str:
        return self._resolved().label

    @property
    def version_id(self) -> int | None:
        return self._resolved().version_id

    @property
    def stats(self) -> EngineStats:
        if self._stats is None:
            self._stats = EngineStats("transformers", self.name)
        return self._stats

    @property
    def model(self):
        return self._loaded().model

    @property
    def tokenizer(self):
        return self._loaded().tokenizer

    def check(self) -> None:
        """Load the model now, before anything is asked."""
        self._loaded()

    # --- the calls ----------------------------------------------------------------------------------------

    def generate(self, asks: Sequence[Generate]) -> list[Generation]:
        """One sampled reply per ask; the asks sharing their sampling go through `generate` together."""
        from preflab.lm.loading import chat_prompt
        from preflab.lm.sampling import generate_texts

        start = time.perf_counter()
        out: list[Generation | None] = [None] * len(asks)
        groups: dict[object, list[int]] = {}
        for i, ask in enumerate(asks):
            groups.setdefault((ask.sampling, ask.logprob), []).append(i)
        for (sampling, logprob), members in groups.items():
            for part in chunks(members, self.batch_size):
                texts = [chat_prompt(self.tokenizer, asks[i].prompt) + asks[i].answer_start for i in part]
                results = generate_texts(
                    self.model,
                    self.tokenizer,
                    texts,
                    max_new_tokens=sampling.max_tokens,
                    do_sample=sampling.temperature > 0,
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    top_k=sampling.top_k,
                    seed=sampling.seed,
                    logprobs=logprob,
                )
                for i, text, result in zip(part, texts, results):
                    out[i] = result
                    self._count(text, result.tokens)
        self.stats.seconds += time.perf_counter() - start
        return out  # type: ignore[return-value]

    def top_logprobs(self, asks: Sequence[Logprobs]) -> list[TokenLogprobs]:
        """Each greedy reply's first tokens with their alternatives; a reply held to choices is the likeliest
        choice, its alternatives each choice's log-probability (its spellings summed), as a server's structured
        output reads."""
        start = time.perf_counter()
        out: list[TokenLogprobs | None] = [None] * len(asks)
        held: dict[tuple[str, tuple[str, ...]], list[int]] = {}
        for i, ask in enumerate(asks):
            if ask.choices:
                held.setdefault((ask.answer_start, ask.choices), []).append(i)
        for (answer_start, choices), members in held.items():
            for i, read in zip(members, self._choices([asks[i] for i in members], answer_start, choices)):
                best = max(choices, key=read.__getitem__)
                out[i] = TokenLogprobs(best, [best], [read])
        free = [i for i, ask in enumerate(asks) if not ask.choices]
        for part in chunks(free, self.batch_size):
            for i, answer in zip(part, self._greedy([asks[i] for i in part])):
                out[i] = answer
        self.stats.seconds += time.perf_counter() - start
        return out  # type: ignore[return-value]

    def _choices(self, asks: list[Logprobs], answer_start: str, choices: tuple[str, ...]) -> list[dict[str, float]]:
        from preflab.lm.forward import choice_logprobs
        from preflab.lm.loading import chat_prompt

        texts = [chat_prompt(self.tokenizer, ask.prompt) for ask in asks]
        for text in texts:
            self._count(text + answer_start, 1)
        return choice_logprobs(self.model, self.tokenizer, texts, answer_start, choices, self.batch_size)

    def _greedy(self, asks: list[Logprobs]) -> list[TokenLogprobs]:
        import torch

        from preflab.lm.loading import chat_prompt
        from preflab.lm.sampling import stop_ids

        tok, model = self.tokenizer, self.model
        stop = stop_ids(model, tok)
        steps = max(ask.max_tokens for ask in asks)
        k = max(ask.top_logprobs for ask in asks)
        texts = [chat_prompt(tok, ask.prompt) + ask.answer_start for ask in asks]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
        with torch.inference_mode():
            result = model.generate(
                **enc,
                max_new_tokens=steps,
                do_sample=False,
                temperature=None,
                top_p=None,
                top_k=None,
                output_logits=True,
                return_dict_in_generate=True,
                pad_token_id=tok.pad_token_id,
            )
        generated = result.sequences[:, enc["input_ids"].shape[1] :].tolist()
        logprobs = [torch.log_softmax(step.float(), dim=-1).topk(k) for step in result.logits]
        out = []
        for row, (ask, text) in enumerate(zip(asks, texts)):
            ids = generated[row][: ask.max_tokens]
            end = next((n for n, t in enumerate(ids) if t in stop), len(ids))
            tops = [
                {
                    tok.decode([t]): v
                    for t, v in zip(
                        logprobs[n].indices[row, : ask.top_logprobs].tolist(),
                        logprobs[n].values[row, : ask.top_logprobs].tolist(),
                    )
                }
                for n in range(end)
            ]
            out.append(
                TokenLogprobs(
                    tok.decode(ids[:end], skip_special_tokens=True), [tok.decode([t]) for t in ids[:end]], tops
                )
            )
            self._count(text, end)
        return out

    def likelihood(self, asks: Sequence[Likelihood]) -> list[ReplyLogprob]:
        """log p of each reply's tokens given the conversation, the tokens a server scores (`preflab.lm.replies`)."""
        from preflab.lm.replies import reply_logprobs, reply_tokens
        from preflab.lm.scoring import pad_id

        start = time.perf_counter()
        rows = [reply_tokens(self.tokenizer, ask.prompt, ask.reply) for ask in asks]
        out = [
            ReplyLogprob(total, n)
            for total, n in reply_logprobs(self.model, rows, pad_id(self.tokenizer), self.batch_size)
        ]
        self.stats.requests += len(rows)
        self.stats.tokens_in += sum(len(ids) for ids, _ in rows)
        self.stats.seconds += time.perf_counter() - start
        return out

    def _count(self, text: str, generated: int) -> None:
        self.stats.requests += 1
        self.stats.tokens_in += len(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        self.stats.tokens_out += generated

    def close(self) -> None:
        """Nothing to let go of: the model belongs to the cache that loaded it."""
