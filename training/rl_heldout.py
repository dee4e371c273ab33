"""How `train rl` measures what training did: fresh samples of the start and trained policies on held-out
prompts, scored by the reward model, with the KL between the two policies (`preflab.training.rl.evaluate_run`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from preflab.lm.sampling import SamplingConfig


def _formatted(tokenizer, prompt) -> str:
    if isinstance(prompt, list):
        return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    return prompt


def _as_response(prompt, text: str):
    return [{"role": "assistant", "content": text}] if isinstance(prompt, list) else text


def heldout_samples(
    model, tokenizer, prompts: list, config: SamplingConfig, seed: int, batch_size: int = 32
) -> tuple[list, list]:
    """`config.n` sampled completions per prompt: (prompt of each, completion of each)."""
    from preflab.lm.sampling import generate_texts

    rows = [p for p in prompts for _ in range(config.n)]
    texts = [_formatted(tokenizer, p) for p in rows]
    completions = []
    for start in range(0, len(texts), batch_size):
        completions += [
            _as_response(rows[start + i], g.text)
            for i, g in enumerate(
                generate_texts(
                    model,
                    tokenizer,
                    texts[start : start + batch_size],
                    max_new_tokens=config.max_new_tokens,
                    temperature=config.temperature,
                    top_p=config.top_p,
                    seed=seed + start,
                )
            )
        ]
    return rows, completions


def mean_and_stderr(values: Sequence[float]) -> tuple[float | None, float | None]:
    n = len(values)
    if not n:
        return None, None
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var / n)


def evaluate_policy_rewards(
    policy_path: str, start_path: str, reward_path: str, prompts: list, config: SamplingConfig, batch_size: int = 32
) -> dict[str, Any]:
    """Fresh samples of the start and trained policies on held-out prompts, scored by the reward model.

    Also the KL(π‖π_start) of the trained policy, a Monte-Carlo estimate from its
    own samples: the mean of log π(y|x) − log π_start(y|x), with its standard error.
    A multi-objective reward model is read as training read it (`config.reward_head`, `reward_combine`):
    by a rule, each prompt's samples of both policies are ordered together, and each policy's reward is
    its samples' mean place among them (0 … 1: above 0.5, the rule prefers that policy's samples).
    """
    from preflab.db.export.heads import heads_reader
    from preflab.lm.loading import head_names, load_causal_lm, load_sequence_scorer
    from preflab.lm.scoring import completion_logprobs, reward_scores, reward_vectors

    if not prompts:
        return {"heldout_prompts": 0}
    scorer, scorer_tokenizer = load_sequence_scorer(reward_path, heads=True)
    head, combine = getattr(config, "reward_head", None), getattr(config, "reward_combine", None)
    options = ("--reward-head NAME", "--reward-combine RULE")
    read = heads_reader(head_names(scorer.config), scorer.config.num_labels, head, combine, options=options)
    policy, tokenizer = load_causal_lm(policy_path)
    start, _ = load_causal_lm(start_path)
    out: dict[str, Any] = {"heldout_prompts": len(prompts)}
    drawn = {}
    for name, model in (("start", start), ("policy", policy)):
        drawn[name] = heldout_samples(model, tokenizer, prompts, config, config.seed, batch_size)
        if name == "policy":
            rows, completions = drawn[name]
            mine = completion_logprobs(policy, tokenizer, rows, completions, batch_size)
            theirs = completion_logprobs(start, tokenizer, rows, completions, batch_size)
            out["heldout_kl"], out["heldout_kl_stderr"] = mean_and_stderr([a - b for a, b in zip(mine, theirs)])
    if read is None:
        scores = {name: reward_scores(scorer, scorer_tokenizer, *drawn[name], batch_size) for name in drawn}
    else:
        vectors = {name: reward_vectors(scorer, scorer_tokenizer, *drawn[name], batch_size) for name in drawn}
        scores = (
            {name: read(vectors[name]) for name in drawn} if combine is None else _together(read, vectors, config.n)
        )
    for name in drawn:
        out[f"heldout_reward_{name}"], out[f"heldout_reward_{name}_stderr"] = mean_and_stderr(scores[name])
    out["heldout_reward_gain"] = out["heldout_reward_policy"] - out["heldout_reward_start"]
    return out


def _together(read, vectors: dict[str, list], n: int) -> dict[str, list[float]]:
    """Each policy's samples' places among one prompt's samples of both (`read` orders one group by the rule).

    `heldout_samples` draws `n` samples a prompt, the prompts in the same order for both policies.
    """
    out: dict[str, list[float]] = {name: [] for name in vectors}
    for at in range(0, len(vectors["start"]), n):
        places = read(vectors["start"][at : at + n] + vectors["policy"][at : at + n])
        out["start"] += places[:n]
        out["policy"] += places[n:]
    return out
