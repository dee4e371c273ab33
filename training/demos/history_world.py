"""A digit world where the history matters: the instruction comes in an earlier turn.

A conversation is a system message holding one digit D (the instruction: start your
reply with D), then the user's turn of four distinct digits; the assistant replies
with four digits by the base rule of the digit world (`toy_world`: each digit is one
of the last four digits so far, plus one). D is always a digit the base rule allows
first (one of the user's digits + 1), and the base language ignores it: the base
model starts with D a quarter of the time. The simulated annotator prefers the
replies that start with D. The last user turn alone says nothing about D, so only a
model that reads the whole conversation can learn the preference: DPO on the
conversational export should make the policy follow the instruction (≥ 0.9).

The model is a real transformers Llama with a WordLevel tokenizer over the digits
and a chat template of its own (`<system> 7 </s> <user> 4 5 9 1 </s> <assistant>`),
saved with `save_pretrained`, so TRL renders the export's messages with that
template exactly as it would an instruct model's.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from preflab.training.demos import toy_world as toy

ROLES = ("system", "user", "assistant")
SPECIAL = toy.SPECIAL + [str(d) for d in range(10)] + [f"<{role}>" for role in ROLES]
TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} </s> {% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
EOS = toy.SPECIAL.index("</s>")
# <system> D </s> <user> x1 x2 x3 x4 </s> <assistant>: the tokens before the reply
CONTEXT = 3 + toy.INPUT_DIGITS + 3


def digit_role_tokenizer():
    """The digit tokenizer with role tokens and a chat template (digit d is still token DIGIT0 + d)."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({token: i for i, token in enumerate(SPECIAL)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)]
    )
    # Matched whole before the pre-tokenizer splits on punctuation.
    core.add_special_tokens([AddedToken(t, special=True) for t in ("</s>", *(f"<{r}>" for r in ROLES))])
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="</s>", unk_token="<unk>", chat_template=TEMPLATE
    )


def role(name: str) -> int:
    return SPECIAL.index(f"<{name}>")


def conversation(instruction: int, digits: Sequence[int]) -> list[dict[str, str]]:
    """The prompt as messages: the instruction in the system turn, the user's digits after it."""
    return [{"role": "system", "content": str(instruction)}, {"role": "user", "content": toy.completion_text(digits)}]


def parse(messages: Sequence[dict[str, str]]) -> tuple[int, list[int]]:
    """(instruction, user digits) of a stored conversation."""
    system, user = messages[0]["content"], messages[-1]["content"]
    return int(system), toy.parse_digits(user)


def encode(instruction: int, digits: Sequence[int], output: Sequence[int] = ()) -> list[int]:
    """Token ids of the conversation as its chat template renders it (with the reply and EOS, if given)."""
    ids = [
        role("system"),
        toy.DIGIT0 + instruction,
        EOS,
        role("user"),
        *(toy.DIGIT0 + d for d in digits),
        EOS,
        role("assistant"),
    ]
    return ids + ([toy.DIGIT0 + d for d in output] + [EOS] if output else [])


def sample_conversation(rng: random.Random) -> tuple[int, list[int]]:
    """A user's digits and an instruction the base rule can follow (one of them + 1), drawn uniformly."""
    digits = toy.sample_prompt(rng)
    return rng.choice(sorted(toy.allowed(digits))), digits


def train_base_model(
    path: str | Path, steps: int = 400, batch_size: int = 128, lr: float = 3e-3, seed: int = 0
) -> Path:
    """Teach a tiny Llama the base language in conversations whose instruction it ignores; save it to `path`."""

    def batch(rng: random.Random) -> list[list[int]]:
        rows = []
        for _ in range(batch_size):
            instruction, digits = sample_conversation(rng)
            rows.append(encode(instruction, digits, toy.sample_output(rng, digits)))
        return rows

    return toy.fit_language(
        path, digit_role_tokenizer(), batch, CONTEXT, steps=steps, lr=lr, hidden=64, layers=2, seed=seed, positions=32
    )


def annotator_tiers(instruction: int, outputs: Sequence[Sequence[int]]) -> list[list[int]]:
    """The annotator's ranking, best first: the replies that start with the instructed digit, then the rest."""
    top = [i for i, o in enumerate(outputs) if o and o[0] == instruction]
    rest = [i for i in range(len(outputs)) if i not in top]
    return [tier for tier in (top, rest) if tier]


def sample_replies(
    model, conversations: Sequence[tuple[int, Sequence[int]]], n: int, seed: int = 0
) -> list[list[list[int]]]:
    """n sampled replies (digits) per (instruction, digits) conversation."""
    return toy.sample_digits(model, [encode(i, d) for i, d in conversations], n, seed)


def follow_report(
    policy, base, conversations: Sequence[tuple[int, Sequence[int]]], samples: int = 8, seed: int = 0
) -> dict:
    """How often each model's reply starts with the instructed digit, and whether the rest keeps the base rule.

    follow_rate: the mean probability of the instructed first digit (exact, from
    the next-token distribution: the share of replies that follow it); sampled_*:
    the same, and the base rule, on `samples` sampled replies per conversation.
    """
    import torch

    contexts = torch.tensor([encode(i, d) for i, d in conversations])
    wanted = torch.tensor([toy.DIGIT0 + i for i, _ in conversations])
    out = {}
    for name, model in (("policy", policy), ("base", base)):
        with torch.no_grad():
            probs = model(input_ids=contexts).logits[:, -1].float().softmax(-1)
        out[f"follow_rate_{name}"] = probs[torch.arange(len(conversations)), wanted].mean().item()
    replies = sample_replies(policy, conversations, samples, seed)
    pairs = [(c, o) for c, group in zip(conversations, replies) for o in group]
    out["sampled_follow_rate"] = sum(bool(o) and o[0] == c[0] for c, o in pairs) / len(pairs)
    out["base_rule_rate"] = sum(toy.follows_base_rule(c[1], o) for c, o in pairs) / len(pairs)
    return out


def write_rankings(
    base_path: Path, prompts: int, candidates: int, seed: int, out: Path, annotator: str = "simulated-annotator"
) -> int:
    """Sample replies from the base model for `prompts` conversations; write the annotator's rankings as JSON Lines.

    Each record's `prompt` is the conversation as messages, as `import rankings` reads them.
    """
    import json

    from transformers import AutoModelForCausalLM

    rng = random.Random(seed)
    chosen: dict[tuple, None] = {}
    while len(chosen) < prompts:
        instruction, digits = sample_conversation(rng)
        chosen[(instruction, tuple(digits))] = None
    model = AutoModelForCausalLM.from_pretrained(base_path)
    replies = sample_replies(model, list(chosen), candidates, seed=seed)
    lines = 0
    with out.open("w", encoding="utf-8") as handle:
        for n, ((instruction, digits), sampled) in enumerate(zip(chosen, replies)):
            distinct = list(dict.fromkeys(tuple(o) for o in sampled if o))
            if len(distinct) < 2:
                continue
            record = {
                "prompt": conversation(instruction, digits),
                "responses": [toy.completion_text(o) for o in distinct],
                "ranking": annotator_tiers(instruction, distinct),
                "annotator": annotator,
                "annotator_kind": "human",
                "id": f"history-{seed}-{n}",
                "model": str(base_path),
            }
            handle.write(json.dumps(record) + "\n")
            lines += 1
    return lines
