"""The N draws of best-of-n sampling (`preflab.training.bestofn.sample`): in process, or from a server.

Sampling uses the policy's own generation loop with the scores of the processed
(temperature, top-p) distribution, so each response's probability under what
was actually sampled is known: Beirami et al.'s KL estimate d_n(ε) needs it.
On a server (`--engine openai`) each draw is a request of its own, seeded by its
prompt and index so a re-run is answered from the request store; a server does
not say what the processed distribution gave a reply, so its draws' `logprob`
is None and the KL is left at its bound.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from preflab.db.conversation import Messages
from preflab.lm.engines import Failed, Generate, Sampling
from preflab.training.bestofn.config import BonSampleConfig


@dataclass
class Sample:
    text: str
    logprob: float | None  # log P(token sequence) under the processed sampling distribution (None: a server's)
    tokens: int  # generated tokens, the end-of-turn token included
    finished: bool  # ended with an end-of-turn token rather than at max_new_tokens
    token_ids: list[int] = field(default_factory=list, repr=False)  # generated, up to the end-of-turn token


def sample_sequences(model, tokenizer, texts: list[str], config: BonSampleConfig, seed: int) -> list[list[Sample]]:
    """`config.n` samples for each formatted text, in one batched `generate` call (left padding)."""
    import torch

    from preflab.lm.sampling import stop_ids

    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    torch.manual_seed(seed)
    with torch.inference_mode():
        out = model.generate(
            **enc,
            do_sample=True,
            temperature=config.temperature,
            top_p=config.top_p,
            top_k=config.top_k,
            max_new_tokens=config.max_new_tokens,
            num_return_sequences=config.n,
            pad_token_id=tokenizer.pad_token_id,
            output_scores=True,
            return_dict_in_generate=True,
        )
        # log-softmax of the processed scores: each token's probability under what was sampled.
        steps = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True).float().cpu()
    generated = out.sequences[:, enc["input_ids"].shape[1] :].tolist()
    stop = stop_ids(model, tokenizer)
    samples: list[Sample] = []
    for row, logps in zip(generated, steps.tolist()):
        end = next((i for i, t in enumerate(row) if t in stop), None)
        used = len(row) if end is None else end + 1
        text = tokenizer.decode(row if end is None else row[:end], skip_special_tokens=True).strip()
        samples.append(Sample(text, float(sum(logps[:used])), used, end is not None, row[:used]))
    return [samples[i * config.n : (i + 1) * config.n] for i in range(len(texts))]


def batch_seed(base: int, prompt_ids: list[int]) -> int:
    """The seed of a batch of prompts' draws (of one prompt's, on a server), the same on every run."""
    key = f"{base}:{prompt_ids}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:4], "big") & 0x7FFFFFFF


def draw_on_server(engine, batch: list[tuple[int, Messages]], config: BonSampleConfig) -> list[list[Sample] | Failed]:
    """`config.n` draws per prompt from a server, or why a prompt got none; each prompt seeded by itself."""
    asks = [
        Generate(
            turns,
            Sampling(config.max_new_tokens, config.temperature, config.top_p, batch_seed(config.seed, [pid])),
            index=i,
        )
        for pid, turns in batch
        for i in range(config.n)
    ]
    answers = engine.generate(asks)
    out: list[list[Sample] | Failed] = []
    for k in range(len(batch)):
        mine = answers[k * config.n : (k + 1) * config.n]
        failed = next((a for a in mine if isinstance(a, Failed)), None)
        out.append(failed or [Sample(a.text, None, a.tokens, a.finished) for a in mine])
    return out
