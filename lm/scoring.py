"""Scoring with trained models: rewards, completion log-probabilities, held-out metrics.

Sequences are tokenized exactly as TRL's trainers tokenize them while training
(plain text gets the EOS token appended; chat messages go through the chat
template), so a held-out number measures the model on the inputs it learned on.
Every distinct (prompt, response) is scored once, however many pairs it is in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from preflab.db.conversation import Message, assistant_turn, is_multi_turn, user_turn
from preflab.db.store import chunks

Text = Any  # a string, or a list of chat messages for conversational exports


def exchange(prompt: Sequence[Message], reply: Sequence[Message], conversational: bool = False) -> tuple[Text, Text]:
    """A stored (prompt, reply) as the scorers here take it: plain text, or chat messages.

    A user's one message and one assistant reply stay plain text unless
    `conversational` (a reward model scores them as it trained on them: `as_trained`).
    Anything longer (a system prompt, earlier turns, a reply of several turns) is
    messages, so the chat template carries the whole history: plain text cannot hold it.
    """
    if conversational or is_multi_turn(prompt) or len(reply) != 1 or reply[0]["role"] != "assistant":
        return list(prompt), list(reply)
    return prompt[0]["content"], reply[0]["content"]


def as_trained(tokenizer, prompt: Text, response: Text) -> tuple[Text, Text]:
    """A (prompt, response) in the form a scorer with this tokenizer trained on.

    A model with a chat template of its own trains on chat messages whatever its
    dataset version's form (`preflab.training.data.for_model`), so a plain-text
    exchange becomes one user turn and one assistant turn; other pairs are unchanged.
    """
    from preflab.lm.loading import has_chat_template

    if isinstance(prompt, str) and has_chat_template(tokenizer):
        return user_turn(prompt), assistant_turn(response)
    return prompt, response


def sequence_ids(tokenizer, prompt: Text, response: Text) -> list[int]:
    """Token ids of prompt + response, built the way TRL's RewardTrainer builds them."""
    if isinstance(prompt, list):
        return list(tokenizer.apply_chat_template(prompt + response, tokenize=True, return_dict=True)["input_ids"])
    eos = tokenizer.eos_token or ""
    if eos and not response.endswith(eos):
        response = response + eos
    return list(tokenizer(text=prompt + response)["input_ids"])


def completion_split(tokenizer, prompt: Text, completion: Text) -> tuple[list[int], list[int]]:
    """(prompt ids, completion ids) as TRL's DPOTrainer splits them: at the common prefix."""
    if isinstance(prompt, list):
        prompt_ids = tokenizer.apply_chat_template(prompt, tokenize=True, add_generation_prompt=True, return_dict=True)[
            "input_ids"
        ]
        full = tokenizer.apply_chat_template(prompt + completion, tokenize=True, return_dict=True)["input_ids"]
    else:
        eos = tokenizer.eos_token or ""
        if eos and not completion.endswith(eos):
            completion = completion + eos
        prompt_ids = tokenizer(text=prompt)["input_ids"]
        full = tokenizer(text=prompt + completion)["input_ids"]
    from preflab.lm.replies import reply_start

    n = reply_start(prompt_ids, full)
    return list(full[:n]), list(full[n:])


def _device(model):
    return next(model.parameters()).device


def _right_pad(rows: Sequence[Sequence[int]], pad_id: int):
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    return ids, mask


def pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def reward_scores(
    model, tokenizer, prompts: Sequence[Text], responses: Sequence[Text], batch_size: int = 32
) -> list[float]:
    """The reward model's scalar score of each (prompt, response), read in the form it trained on (`as_trained`)."""
    return _read(model, tokenizer, prompts, responses, batch_size, lambda logits: logits[:, 0])


def reward_vectors(
    model, tokenizer, prompts: Sequence[Text], responses: Sequence[Text], batch_size: int = 32
) -> list[list[float]]:
    """A multi-objective reward model's scores of each (prompt, response): one per head, in head order."""
    return _read(model, tokenizer, prompts, responses, batch_size, lambda logits: logits)


def _read(model, tokenizer, prompts, responses, batch_size: int, take) -> list:
    """What `take` reads of each distinct (prompt, response)'s logits, batched by length, in the asked order."""
    import torch

    keys = [repr((p, r)) for p, r in zip(prompts, responses)]
    unique = {}
    for key, p, r in zip(keys, prompts, responses):
        unique.setdefault(key, (p, r))
    order = list(unique)
    # Sorting by length keeps padding (and wasted compute) low.
    encoded = sorted(
        ((k, sequence_ids(tokenizer, *as_trained(tokenizer, *unique[k]))) for k in order), key=lambda kv: len(kv[1])
    )
    scores: dict[str, Any] = {}
    model.eval()
    device = _device(model)
    with torch.no_grad():
        for batch in chunks(encoded, batch_size):
            ids, mask = _right_pad([row for _, row in batch], pad_id(tokenizer))
            logits = take(model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits)
            for (key, _), value in zip(batch, logits.float().tolist()):
                scores[key] = value
    return [scores[k] for k in keys]


def completion_logprobs(
    model, tokenizer, prompts: Sequence[Text], completions: Sequence[Text], batch_size: int = 32
) -> list[float]:
    """Sum of log π(completion token | prefix) for each (prompt, completion)."""
    import torch

    rows = [completion_split(tokenizer, p, c) for p, c in zip(prompts, completions)]
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]) + len(rows[i][1]))
    out = [0.0] * len(rows)
    model.eval()
    device = _device(model)
    with torch.no_grad():
        for batch in chunks(order, batch_size):
            seqs = [rows[i][0] + rows[i][1] for i in batch]
            ids, mask = _right_pad(seqs, pad_id(tokenizer))
            ids, mask = ids.to(device), mask.to(device)
            logps = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float().log_softmax(-1)
            token_logps = logps.gather(-1, ids[:, 1:, None]).squeeze(-1)
            for row, i in enumerate(batch):
                start, end = len(rows[i][0]), len(rows[i][0]) + len(rows[i][1])
                # Position t predicts token t + 1, so the completion's tokens are scored at start-1 … end-2.
                out[i] = token_logps[row, start - 1 : end - 1].sum().item()
    return out


def pair_rewards(
    model, tokenizer, prompts: Sequence[Text], chosen: Sequence[Text], rejected: Sequence[Text], batch_size: int = 32
) -> tuple[list[float], list[float]]:
    """(chosen's scores, rejected's scores): both sides in one `reward_scores` call, so a reply that is
    chosen in one pair and rejected in another (every middle reply of a ranking) is scored once."""
    n = len(prompts)
    scores = reward_scores(model, tokenizer, [*prompts, *prompts], [*chosen, *rejected], batch_size)
    return scores[:n], scores[n:]


def pairwise_accuracy(model, tokenizer, split, batch_size: int = 32) -> dict[str, float | int]:
    """Held-out accuracy of a reward model: the share of pairs where chosen outscores rejected."""
    prompts = list(split["prompt"])
    chosen, rejected = pair_rewards(
        model, tokenizer, prompts, list(split["chosen"]), list(split["rejected"]), batch_size
    )
    n = len(prompts)
    wins = sum(c > r for c, r in zip(chosen, rejected))
    return {
        "accuracy": wins / n if n else None,
        "pairs": n,
        "mean_margin": sum(c - r for c, r in zip(chosen, rejected)) / n if n else None,
    }


def implicit_reward_metrics(
    policy, reference, tokenizer, split, beta: float, batch_size: int = 32
) -> dict[str, float | int]:
    """DPO's implicit reward β·log(π/π_ref) on held-out pairs: accuracy and margins."""
    prompts = list(split["prompt"])
    n = len(prompts)
    if not n:
        return {"reward_accuracy": None, "reward_margin": None, "pairs": 0}
    rewards = {}
    for side in ("chosen", "rejected"):
        texts = list(split[side])
        pol = completion_logprobs(policy, tokenizer, prompts, texts, batch_size)
        ref = completion_logprobs(reference, tokenizer, prompts, texts, batch_size)
        rewards[side] = [beta * (p - r) for p, r in zip(pol, ref)]
    margins = [c - r for c, r in zip(rewards["chosen"], rewards["rejected"])]
    return {
        "reward_accuracy": sum(m > 0 for m in margins) / n,
        "reward_margin": sum(margins) / n,
        "chosen_reward": sum(rewards["chosen"]) / n,
        "rejected_reward": sum(rewards["rejected"]) / n,
        "pairs": n,
    }
