"""A digit world ranked by two criteria that conflict: helpfulness and harmlessness, by planted rules.

The language is the digit world's (`toy_world`: 4 input digits, a separator, 4 output
digits, each one of the last four digits so far + 1). Two planted rules judge a reply:

- it **helps** when it carries the answer: its first digit is the last input digit + 1
  (the digit world's hidden preference; the base language gives it ≈ 1/4);
- it is **unsafe** when it carries the harmful marker: its first two digits count up
  (d, d + 1). The base rule always allows d + 1 after d, so the base language writes
  the marker ≈ 1/4 of the time, whatever the first digit.

An annotation campaign of such a world asks about the hard cases: each prompt's pool
(`POOL`) holds replies that help but are unsafe and replies that are safe but do not
help, with one of each other kind. Each criterion's ranking follows its rule alone
(`criterion_tiers`), so on a pair of a helpful-unsafe and a safe-unhelpful reply the
two criteria disagree. `lexicographic:harmlessness,helpfulness` (safe first, helpful
among the safe) orders a pool: safe and helpful, safe, unsafe but helpful, neither.

`rankings_file` writes the pools' rankings as JSON Lines, one ranking per criterion
(and, with `mixed=True`, the same rankings again as criterion `overall` from two
annotators: what a store without criteria held, PKU-SafeRLHF's two verdicts as two
people). `policy_rates` measures a policy exactly against the planted rules.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

from preflab.training.demos import toy_world as toy

HELPFULNESS, HARMLESSNESS = "helpfulness", "harmlessness"
CRITERIA = (HARMLESSNESS, HELPFULNESS)  # in name order, as the store lists them
SAFETY_FIRST = f"lexicographic:{HARMLESSNESS},{HELPFULNESS}"
# A pool: (helps, safe) -> how many such replies. Two of each conflicting kind, one of each other.
POOL = {(True, False): 2, (False, True): 2, (True, True): 1, (False, False): 1}
MIXED_ANNOTATORS = {HELPFULNESS: "helpfulness-rater", HARMLESSNESS: "harmlessness-rater"}


def answer(prompt: Sequence[int]) -> int:
    """The digit a helpful reply starts with."""
    return toy.preferred_first(prompt)


def helps(prompt: Sequence[int], reply: Sequence[int]) -> bool:
    return bool(reply) and reply[0] == answer(prompt)


def unsafe(reply: Sequence[int]) -> bool:
    """The planted harmful marker: the reply's first two digits count up."""
    return len(reply) >= 2 and reply[1] == (reply[0] + 1) % 10


def criterion_tiers(criterion: str, prompt: Sequence[int], replies: Sequence[Sequence[int]]) -> list[list[int]]:
    """One criterion's ranking of `replies`, best first: the replies its rule likes, then the rest."""
    good = [helps(prompt, r) if criterion == HELPFULNESS else not unsafe(r) for r in replies]
    return [tier for tier in ([i for i, g in enumerate(good) if g], [i for i, g in enumerate(good) if not g]) if tier]


def safety_first_tiers(prompt: Sequence[int], replies: Sequence[Sequence[int]]) -> list[list[int]]:
    """The planted rules combined lexicographically: safe before unsafe, helpful before unhelpful among each."""
    kinds = [(not unsafe(r), helps(prompt, r)) for r in replies]
    order = [(True, True), (True, False), (False, True), (False, False)]
    return [tier for tier in ([i for i, k in enumerate(kinds) if k == kind] for kind in order) if tier]


def pool(rng: random.Random, prompt: Sequence[int], tries: int = 2000) -> list[list[int]]:
    """Distinct replies of the base language for `prompt`, as many of each kind as `POOL` asks, shuffled.

    Replies are drawn by the base rule and kept while their kind still has room.
    """
    wanted = dict(POOL)
    replies: list[list[int]] = []
    for _ in range(tries):
        reply = toy.sample_output(rng, prompt)
        kind = (helps(prompt, reply), not unsafe(reply))
        if wanted.get(kind) and reply not in replies:
            wanted[kind] -= 1
            replies.append(reply)
            if not any(wanted.values()):
                break
    rng.shuffle(replies)
    return replies


def rankings_file(out: Path, prompts: int, seed: int = 0, mixed: bool = False) -> int:
    """Write the pools' rankings by each criterion as JSON Lines (`import rankings`); returns the prompts written.

    Args:
        mixed: also write each ranking as criterion `overall`, from one annotator per criterion
            (`MIXED_ANNOTATORS`): the mixture a store without criteria would hold.
    """
    rng = random.Random(seed)
    chosen: dict[tuple[int, ...], None] = {}
    while len(chosen) < prompts:
        chosen[tuple(toy.sample_prompt(rng))] = None
    with out.open("w", encoding="utf-8") as handle:
        for prompt in chosen:
            replies = pool(rng, prompt)
            for criterion in CRITERIA:
                record = {
                    "prompt": toy.prompt_text(prompt),
                    "responses": [toy.completion_text(r) for r in replies],
                    "ranking": criterion_tiers(criterion, prompt, replies),
                    "annotator_kind": "human",
                    "model": "criteria-world",
                }
                handle.write(json.dumps(record | {"annotator": "planted-rules", "criterion": criterion}) + "\n")
                if mixed:
                    handle.write(json.dumps(record | {"annotator": MIXED_ANNOTATORS[criterion]}) + "\n")
    return len(chosen)


def policy_rates(model, prompts: Sequence[Sequence[int]]) -> dict[str, float]:
    """A policy's exact rates of the planted kinds on `prompts`, from its first two next-token distributions.

    safe: P(no marker); helpful: P(the answer first); safe_and_helpful: both;
    helpful_given_safe: P(helpful | safe). Means over the prompts.
    """
    import torch

    context = torch.tensor([toy.encode(p) for p in prompts])
    digits = torch.arange(10)
    with torch.no_grad():
        first = model(input_ids=context).logits[:, -1, toy.DIGIT0 : toy.DIGIT0 + 10].float().softmax(-1)
        # Every first digit d in one batch: P(second digit | prompt, d) for each prompt and d.
        extended = torch.cat([context.repeat_interleave(10, 0), (toy.DIGIT0 + digits).repeat(len(prompts))[:, None]], 1)
        probs = model(input_ids=extended).logits[:, -1].float().softmax(-1).view(len(prompts), 10, -1)
    # P(marker | d) = P(second = d + 1 | d)
    marker = probs[:, digits, toy.DIGIT0 + (digits + 1) % 10]
    safe_by_first = first * (1 - marker)
    answers = torch.tensor([answer(p) for p in prompts])
    rows = torch.arange(len(prompts))
    safe = safe_by_first.sum(-1)
    safe_and_helpful = safe_by_first[rows, answers]
    return {
        "safe": safe.mean().item(),
        "helpful": first[rows, answers].mean().item(),
        "safe_and_helpful": safe_and_helpful.mean().item(),
        "helpful_given_safe": (safe_and_helpful / safe.clamp_min(1e-12)).mean().item(),
    }
