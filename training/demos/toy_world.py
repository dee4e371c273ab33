"""The digit toy world of the minimal-RLHF notebook: a language whose answer is known.

A sentence is 4 input digits, a separator and 4 output digits; each output digit
is (one of the last four digits of the sentence so far + 1) mod 10. The input
digits are distinct, so the base language puts probability 1/4 on each of the
four candidates for the first output digit. The hidden preference: the first
output digit is the last input digit + 1. A policy aligned to it should put
(nearly) all mass on that digit and still follow the base rule afterwards.

Everything here is a real transformers model and tokenizer (a WordLevel vocab of
the digits), saved with `save_pretrained` so the training commands load it like
any checkpoint.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from preflab.files import open_to_umask

SEPARATOR = "="
SPECIAL = ["<pad>", "</s>", "<unk>", SEPARATOR]
DIGIT0 = len(SPECIAL)  # token id of the digit 0; digit d is DIGIT0 + d
INPUT_DIGITS = OUTPUT_DIGITS = 4


def digit_tokenizer():
    """A WordLevel tokenizer over the digits, the separator and pad/eos, built in-process."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL + [str(d) for d in range(10)])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    # Digits are tokens one by one whether or not they are spaced ("4591" or "4 5 9 1").
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def prompt_text(digits: Sequence[int]) -> str:
    return " ".join(map(str, digits)) + " " + SEPARATOR


def completion_text(digits: Sequence[int]) -> str:
    return " ".join(map(str, digits))


def parse_digits(text: str) -> list[int]:
    return [int(c) for c in text if c.isdigit()]


def sample_prompt(rng: random.Random) -> list[int]:
    return rng.sample(range(10), INPUT_DIGITS)


def allowed(sequence: Sequence[int]) -> set[int]:
    """The digits the base rule allows next: one of the last four digits, plus one."""
    return {(d + 1) % 10 for d in sequence[-4:]}


def sample_output(rng: random.Random, prompt: Sequence[int]) -> list[int]:
    seq = list(prompt)
    for _ in range(OUTPUT_DIGITS):
        seq.append((rng.choice(seq[-4:]) + 1) % 10)
    return seq[len(prompt) :]


def preferred_first(prompt: Sequence[int]) -> int:
    return (prompt[-1] + 1) % 10


def follows_base_rule(prompt: Sequence[int], output: Sequence[int]) -> bool:
    seq = list(prompt)
    for digit in output:
        if digit not in allowed(seq):
            return False
        seq.append(digit)
    return len(output) == OUTPUT_DIGITS


def annotator_tiers(prompt: Sequence[int], outputs: Sequence[Sequence[int]]) -> list[list[int]]:
    """The simulated annotator's ranking, best first: its hidden preference and nothing else.

    Outputs whose first digit is the last input digit + 1 share the top tier, the
    rest the second; ties give no pairs, so a prompt whose outputs all agree on
    the first digit yields none.
    """
    top = [i for i, o in enumerate(outputs) if o and o[0] == preferred_first(prompt)]
    rest = [i for i in range(len(outputs)) if i not in top]
    return [tier for tier in (top, rest) if tier]


def train_base_model(
    path: str | Path,
    steps: int = 400,
    batch_size: int = 128,
    lr: float = 3e-3,
    hidden: int = 64,
    layers: int = 2,
    seed: int = 0,
) -> Path:
    """Teach a tiny Llama the base language (loss on the output digits and EOS); save it to `path`."""

    def batch(rng: random.Random) -> list[list[int]]:
        rows = []
        for _ in range(batch_size):
            x = sample_prompt(rng)
            rows.append(encode(x, sample_output(rng, x)))
        return rows

    return fit_language(
        path, digit_tokenizer(), batch, INPUT_DIGITS + 1, steps=steps, lr=lr, hidden=hidden, layers=layers, seed=seed
    )


def fit_language(
    path: str | Path,
    tokenizer,
    batch,
    given: int,
    *,
    steps: int,
    lr: float,
    hidden: int,
    layers: int,
    seed: int,
    positions: int = 16,
) -> Path:
    """Train a fresh tiny Llama on sentences from `batch(rng)` (rows of token ids of one length); save it to `path`.

    The first `given` tokens of a row are context, not predicted; the rest (the
    answer and its EOS) carry the loss.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    rng = random.Random(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=positions,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / steps)
    model.train()
    for _ in range(steps):
        ids = torch.tensor(batch(rng))
        labels = ids.clone()
        labels[:, :given] = -100  # the prompt is given, not predicted
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    model.eval()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    open_to_umask(path)  # safetensors writes the weights 0600
    return Path(path)


def encode(prompt: Sequence[int], output: Sequence[int] = ()) -> list[int]:
    """Token ids of a sentence: the prompt, the separator and (if given) the output and EOS."""
    ids = [DIGIT0 + d for d in prompt] + [SPECIAL.index(SEPARATOR)]
    if output:
        ids += [DIGIT0 + d for d in output] + [SPECIAL.index("</s>")]
    return ids


def sample_outputs(model, prompts: Sequence[Sequence[int]], n: int, seed: int = 0) -> list[list[list[int]]]:
    """n sampled outputs per prompt (digits only: a non-digit token ends an output early)."""
    return sample_digits(model, [encode(p) for p in prompts], n, seed)


def sample_digits(model, contexts: Sequence[Sequence[int]], n: int, seed: int = 0) -> list[list[list[int]]]:
    """n sampled outputs of OUTPUT_DIGITS digits after each context (token ids, all of one length)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    ids = torch.tensor([list(c) for c in contexts for _ in range(n)])
    start = ids.shape[1]
    with torch.no_grad():
        for _ in range(OUTPUT_DIGITS):
            logits = model(input_ids=ids).logits[:, -1].float()
            nxt = torch.multinomial(logits.softmax(-1), 1, generator=generator)
            ids = torch.cat([ids, nxt], dim=1)
    out: list[list[list[int]]] = []
    for i in range(len(contexts)):
        group = []
        for row in ids[i * n : (i + 1) * n, start:].tolist():
            digits = []
            for token in row:
                if not DIGIT0 <= token < DIGIT0 + 10:
                    break
                digits.append(token - DIGIT0)
            group.append(digits)
        out.append(group)
    return out


def output_logprobs(model, prompts: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]]):
    """(log π(output digits | prompt), log π(EOS | prompt, output)) per sentence of OUTPUT_DIGITS digits."""
    import torch

    ids = torch.tensor([encode(p, o) for p, o in zip(prompts, outputs)])
    with torch.no_grad():
        logps = model(input_ids=ids).logits[:, :-1].float().log_softmax(-1)
    token = logps.gather(-1, ids[:, 1:, None]).squeeze(-1)
    # Position t predicts token t + 1: the output digits are predicted at INPUT_DIGITS … the EOS last.
    return token[:, INPUT_DIGITS:-1].sum(-1), token[:, -1]


def policy_report(policy, base, prompts: Sequence[Sequence[int]], samples: int = 8, seed: int = 0) -> dict:
    """What DPO should have changed, and what it should not have.

    p_preferred: mean probability of the preferred first digit (exact, from the
    next-token distribution); kl_to_base: KL(policy ‖ base) of the four output
    digits, estimated from the policy's own samples; base_rule_rate: the share of
    sampled outputs whose every digit follows the base rule; stop_rate: the mean
    probability of EOS after the four digits (the sentence ends there).
    """
    import torch

    encoded = torch.tensor([encode(p) for p in prompts])
    preferred = torch.tensor([DIGIT0 + preferred_first(p) for p in prompts])
    out = {}
    for name, model in (("policy", policy), ("base", base)):
        with torch.no_grad():
            probs = model(input_ids=encoded).logits[:, -1].float().softmax(-1)
        out[f"p_preferred_{name}"] = probs[torch.arange(len(prompts)), preferred].mean().item()
    sampled = sample_outputs(policy, prompts, samples, seed)
    pairs = [(p, o) for p, group in zip(prompts, sampled) for o in group]
    out["base_rule_rate"] = sum(follows_base_rule(p, o) for p, o in pairs) / len(pairs)
    complete = [(p, o) for p, o in pairs if len(o) == OUTPUT_DIGITS]
    out["kl_to_base"] = out["stop_rate"] = None
    if complete:
        ps, os_ = [p for p, _ in complete], [o for _, o in complete]
        mine, stop = output_logprobs(policy, ps, os_)
        theirs, _ = output_logprobs(base, ps, os_)
        # Outputs that stop early (a non-digit token) are left out: rare, and they have no four digits.
        out["kl_to_base"] = (mine - theirs).mean().item()
        out["stop_rate"] = stop.exp().mean().item()
    return out
