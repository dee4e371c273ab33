"""Made-up sentences from a small vocabulary: bench_store.py's rankings and bench_ls_sync.py's tasks."""

from __future__ import annotations

import random

WORDS = [
    "the",
    "model",
    "answer",
    "prompt",
    "reward",
    "policy",
    "gradient",
    "token",
    "river",
    "mountain",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "dog",
    "data",
    "train",
    "test",
    "split",
    "human",
    "judge",
    "rank",
    "prefer",
    "better",
    "worse",
    "explain",
    "because",
    "therefore",
    "example",
    "python",
    "function",
    "value",
    "list",
    "return",
    "error",
    "fix",
]


def sentence(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words)).capitalize() + "."
