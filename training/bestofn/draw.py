"""The N draws of best-of-n sampling (`preflab.training.bestofn.sample`), on any engine.

Each draw is a `Generation` with its `logprob`: its probability under the processed
(temperature, top-p, top-k) distribution it was sampled from, which Beirami et al.'s KL
estimate d_n(ε) needs, where the engine knows it (in process). A server does not say what
the processed distribution gave a reply, so its draws' `logprob` is None and the KL is left
at its bound.

Where the engine draws a call's asks together (in process), a batch of prompts is drawn from
one seed; where it stores every answer (a server), each prompt is seeded by itself and each
draw told apart by its index, so a re-run asks the same and is answered from the request store.
"""

from __future__ import annotations

import hashlib

from preflab.db.conversation import Messages
from preflab.lm.engines import Engine, Failed, Generate, Generation, Sampling
from preflab.training.bestofn.config import BonSampleConfig


def batch_seed(base: int, prompt_ids: list[int]) -> int:
    """The seed of a batch of prompts' draws (of one prompt's, where answers are stored), the same on every run."""
    key = f"{base}:{prompt_ids}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:4], "big") & 0x7FFFFFFF


def draw(
    engine: Engine, batch: list[tuple[int, Messages]], config: BonSampleConfig
) -> tuple[list[list[Generation] | Failed], list[int]]:
    """(`config.n` draws per prompt, or why a prompt got none; the seed each prompt was drawn with)."""
    if engine.stores_answers:
        seeds = [batch_seed(config.seed, [pid]) for pid, _ in batch]
    else:
        seeds = [batch_seed(config.seed, [pid for pid, _ in batch])] * len(batch)
    asks = [
        Generate(
            turns,
            Sampling(config.max_new_tokens, config.temperature, config.top_p, seed, config.top_k),
            index=i,
            logprob=engine.sample_logprobs,
        )
        for (_, turns), seed in zip(batch, seeds)
        for i in range(config.n)
    ]
    answers = engine.generate(asks)
    out: list[list[Generation] | Failed] = []
    for k in range(len(batch)):
        mine = answers[k * config.n : (k + 1) * config.n]
        out.append(next((a for a in mine if isinstance(a, Failed)), None) or list(mine))
    return out, seeds
