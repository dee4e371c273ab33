"""The `transformers` engine: the same three calls on a model loaded in this process.

Generation is `preflab.lm.sampling.generate_texts` over each prompt in the model's chat
format (`preflab.lm.loading.chat_prompt`), a batch per call to `generate`. Reading a reply's
first tokens is one greedy `generate` that keeps each step's logits. A reply's likelihood is
one teacher-forced forward pass over the conversation with the reply as its open last turn,
scored on the tokens a server scores (`preflab.lm.replies`: the in-process likelihood judge's
pass). Nothing is stored: asking again costs nothing but time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from preflab.lm.engines.calls import Generate, Generation, Likelihood, Logprobs, ReplyLogprob, TokenLogprobs
from preflab.lm.engines.config import EngineStats


class TransformersEngine:
    """A causal LM and its tokenizer, already loaded (`preflab.lm.names.load_named_model`)."""

    kind = "transformers"

    def __init__(self, model, tokenizer, label: str, batch_size: int = 8, version_id: int | None = None):
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        self.name = label
        self.version_id = version_id  # the model version it is recorded as
        self.stats = EngineStats("transformers", label)

    def generate(self, asks: Sequence[Generate]) -> list[Generation]:
        """One sampled reply per ask; the asks sharing their sampling go through `generate` together."""
        from preflab.lm.loading import chat_prompt
        from preflab.lm.sampling import generate_texts

        start = time.perf_counter()
        out: list[Generation | None] = [None] * len(asks)
        groups: dict[object, list[int]] = {}
        for i, ask in enumerate(asks):
            groups.setdefault(ask.sampling, []).append(i)
        for sampling, members in groups.items():
            for part in _parts(members, self.batch_size):
                texts = [chat_prompt(self.tokenizer, asks[i].prompt) for i in part]
                results = generate_texts(
                    self.model,
                    self.tokenizer,
                    texts,
                    max_new_tokens=sampling.max_tokens,
                    do_sample=sampling.temperature > 0,
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    seed=sampling.seed,
                )
                for i, text, result in zip(part, texts, results):
                    out[i] = result
                    self._count(text, result.tokens)
        self.stats.seconds += time.perf_counter() - start
        return out  # type: ignore[return-value]

    def top_logprobs(self, asks: Sequence[Logprobs]) -> list[TokenLogprobs]:
        """The first tokens of each greedy reply, with each step's top alternatives (the choices are not enforced:
        the alternatives are read whatever the reply says)."""
        import torch

        from preflab.lm.loading import chat_prompt
        from preflab.lm.sampling import stop_ids

        start = time.perf_counter()
        tok, model = self.tokenizer, self.model
        stop = stop_ids(model, tok)
        out: list[TokenLogprobs | None] = [None] * len(asks)
        for part in _parts(list(range(len(asks))), self.batch_size):
            steps = max(asks[i].max_tokens for i in part)
            k = max(asks[i].top_logprobs for i in part)
            texts = [chat_prompt(tok, asks[i].prompt) + asks[i].answer_start for i in part]
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
            for row, i in enumerate(part):
                ids = generated[row][: asks[i].max_tokens]
                end = next((n for n, t in enumerate(ids) if t in stop), len(ids))
                tops = [
                    {
                        tok.decode([t]): v
                        for t, v in zip(
                            logprobs[n].indices[row, : asks[i].top_logprobs].tolist(),
                            logprobs[n].values[row, : asks[i].top_logprobs].tolist(),
                        )
                    }
                    for n in range(end)
                ]
                out[i] = TokenLogprobs(
                    tok.decode(ids[:end], skip_special_tokens=True), [tok.decode([t]) for t in ids[:end]], tops
                )
                self._count(texts[row], end)
        self.stats.seconds += time.perf_counter() - start
        return out  # type: ignore[return-value]

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
        """Nothing to let go of: the model belongs to whoever loaded it."""

    def __enter__(self) -> TransformersEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _parts(items: list[int], size: int):
    for start in range(0, len(items), size):
        yield items[start : start + size]
