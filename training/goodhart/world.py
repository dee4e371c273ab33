"""The counting world: the toy's digit language with a graded preference whose truth is known.

The language is `preflab.training.demos.toy_world`'s: four distinct input digits,
a separator and four output digits, each one of the last four digits + 1. The
true preference extends the toy's hidden one: the output should count on from
the last input digit (4 1 7 2 = 3 4 5 6). The true reward is the length of that
count, 0–4, and a sentence that breaks the language's rule scores −1, below any
well-formed one. Under the base language each further step of the count has
probability about 1/4, so the base policy's mean true reward is about 1/3.

The simulated annotator ranks sampled candidates by the true reward, noisily:
it orders them by R*/τ plus Gumbel noise (Plackett–Luce, so each of its pairs is
a Bradley–Terry draw with P(a ≻ b) = σ((R*(a) − R*(b))/τ)); candidates of equal
true reward are ordered by the noise alone. A reward model fitted to a limited
number of such comparisons is the proxy: good where the base policy samples
often, unreliable on rare long counts and on broken sentences it has hardly seen.

The output space is small (10⁴ digit strings per prompt), so a policy's whole
output distribution is computed exactly from one forward pass over the 1,000
three-digit prefixes. Tokens that are not digits are left out and the digits
renormalised at each position (trained models give them almost no mass).
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from preflab.training.demos import toy_world as toy

BROKEN = -1.0  # the true reward of a sentence that breaks the base rule
ANNOTATOR = "counting-annotator"
OUTPUTS = np.array(list(itertools.product(range(10), repeat=toy.OUTPUT_DIGITS)), dtype=np.int64)  # (10⁴, 4)


def true_rewards(prompt: Sequence[int], outputs: np.ndarray = OUTPUTS) -> np.ndarray:
    """R*(prompt, y) for every row y of `outputs`: the count's length, or −1 for a broken sentence."""
    seq = np.concatenate([np.broadcast_to(np.asarray(prompt), (len(outputs), len(prompt))), outputs], axis=1)
    start = len(prompt)
    follows = np.ones(len(outputs), dtype=bool)
    for i in range(start, seq.shape[1]):
        window = seq[:, i - 4 : i]
        follows &= ((window + 1) % 10 == seq[:, i : i + 1]).any(axis=1)
    steps = seq[:, start:] == (seq[:, start - 1 : -1] + 1) % 10
    count = np.cumprod(steps, axis=1).sum(axis=1).astype(float)
    return np.where(follows, count, BROKEN)


def true_rewards_table(prompts: Sequence[Sequence[int]]) -> np.ndarray:
    """R* of every output for every prompt: shape (prompts, 10⁴)."""
    return np.stack([true_rewards(p) for p in prompts])


def true_reward(prompt: Sequence[int], output: Sequence[int]) -> float:
    """R* of one output (an early stop, fewer than four digits, is a broken sentence)."""
    if len(output) != toy.OUTPUT_DIGITS:
        return BROKEN
    return float(true_rewards(prompt, np.asarray([output]))[0])


def output_index(output: Sequence[int]) -> int:
    """The row of `OUTPUTS` holding this output."""
    index = 0
    for digit in output:
        index = index * 10 + digit
    return index


def annotator_tiers(
    prompt: Sequence[int], outputs: Sequence[Sequence[int]], temperature: float, rng: random.Random
) -> list[list[int]]:
    """The simulated annotator's ranking of distinct outputs, best first, one per tier (no ties)."""
    rewards = [true_reward(prompt, o) for o in outputs]
    if temperature <= 0:  # a noiseless annotator: equal true rewards share a tier
        levels = sorted(set(rewards), reverse=True)
        return [[i for i, r in enumerate(rewards) if r == level] for level in levels]
    utility = [r / temperature - np.log(-np.log(rng.random())) for r in rewards]  # + Gumbel noise
    return [[i] for i in sorted(range(len(outputs)), key=lambda i: -utility[i])]


def sample_prompts(count: int, seed: int, exclude: set[tuple[int, ...]] = frozenset()) -> list[list[int]]:
    """`count` distinct prompts of the world, none of them in `exclude`."""
    rng = random.Random(seed)
    prompts: dict[tuple[int, ...], None] = {}
    while len(prompts) < count:
        prompt = tuple(toy.sample_prompt(rng))
        if prompt not in exclude:
            prompts[prompt] = None
    return [list(p) for p in prompts]


def write_rankings(
    base_model, prompts: Sequence[Sequence[int]], candidates: int, temperature: float, seed: int, out: Path
) -> int:
    """Sample candidates from the base model, let the annotator rank them, write JSON Lines; returns the lines."""
    rng = random.Random(seed)
    sampled = toy.sample_outputs(base_model, prompts, candidates, seed=seed)
    lines = 0
    with out.open("w", encoding="utf-8") as handle:
        for prompt, group in zip(prompts, sampled):
            distinct = list(dict.fromkeys(tuple(o) for o in group if o))
            if len(distinct) < 2:
                continue
            record = {
                "prompt": toy.prompt_text(prompt),
                "responses": [toy.completion_text(o) for o in distinct],
                "ranking": annotator_tiers(prompt, distinct, temperature, rng),
                "annotator": ANNOTATOR,
                "annotator_kind": "human",
                "id": f"counting-{seed}-{''.join(map(str, prompt))}",
            }
            handle.write(json.dumps(record) + "\n")
            lines += 1
    return lines


def log_probs(model, prompts: Sequence[Sequence[int]], chunk: int = 16) -> np.ndarray:
    """Exact log π(y | prompt) of every output y (rows of `OUTPUTS`), per prompt: shape (prompts, 10⁴)."""
    import torch

    digits = slice(toy.DIGIT0, toy.DIGIT0 + 10)
    prefixes = torch.tensor(list(itertools.product(range(10), repeat=toy.OUTPUT_DIGITS - 1))) + toy.DIGIT0
    start = toy.INPUT_DIGITS  # the position whose logits give the first output digit (the separator)
    out = []
    for first in range(0, len(prompts), chunk):
        batch = prompts[first : first + chunk]
        heads = torch.tensor([toy.encode(p) for p in batch]).repeat_interleave(len(prefixes), dim=0)
        ids = torch.cat([heads, prefixes.repeat(len(batch), 1)], dim=1)
        with torch.no_grad():
            logits = model(input_ids=ids).logits[:, start:, digits].double()
        lp = logits.log_softmax(-1).view(len(batch), 10, 10, 10, toy.OUTPUT_DIGITS, 10)
        # Position k predicts output digit k + 1 from the digits before it (the prefix's first k).
        total = (
            lp[:, 0, 0, 0, 0, :, None, None, None]
            + lp[:, :, 0, 0, 1, :, None, None]
            + lp[:, :, :, 0, 2, :, None]
            + lp[:, :, :, :, 3, :]
        )
        out.append(total.reshape(len(batch), -1).numpy())
    return np.concatenate(out)


class ProxyScores:
    """A reward model's score of (prompt, output), computed on first need and kept."""

    def __init__(self, model, prompts: Sequence[Sequence[int]], batch_size: int = 4096):
        self.model = model
        self.heads = np.array([toy.encode(p) for p in prompts], dtype=np.int64)
        self.values = np.full((len(prompts), len(OUTPUTS)), np.nan)
        self.batch_size = batch_size

    def where(self, mask: np.ndarray) -> np.ndarray:
        """The scores of the outputs where `mask` (prompts × 10⁴) is true; the rest NaN."""
        import torch

        todo = np.argwhere(mask & np.isnan(self.values))
        for first in range(0, len(todo), self.batch_size):
            rows = todo[first : first + self.batch_size]
            # toy_world.encode's layout, exactly how the reward model saw prompt + response + EOS in training.
            ids = np.concatenate(
                [
                    self.heads[rows[:, 0]],
                    OUTPUTS[rows[:, 1]] + toy.DIGIT0,
                    np.full((len(rows), 1), toy.SPECIAL.index("</s>")),
                ],
                axis=1,
            )
            ids = torch.from_numpy(ids)
            with torch.no_grad():
                scores = self.model(input_ids=ids).logits[:, 0].double().numpy()
            self.values[rows[:, 0], rows[:, 1]] = scores
        return np.where(mask, self.values, np.nan)
