"""Batched forward passes that read next-token probabilities without decoding any text: how the
transformers engine answers a judge's verdict (`preflab.lm.engines.local`).

Sequences are padded on the left, so every sequence ends at the last position:
the next-token distribution is the last position's, and `logits_to_keep` skips the
vocabulary projection everywhere else. The prefix that all texts share (a judge's
chat template and rubric) is run once and its key/value cache reused. A reply's
log-probability, the other forward pass an engine makes, is `preflab.lm.replies`'.

A verdict held to its choices ("A" or "B", a score 0-5) is read from the answer's
first token: each choice's log-probability sums its single-token spellings ("A" and
" A"), after the answer's start ("Score: ") tokenized apart (`choice_tokens`).
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Sequence

from preflab.errors import ConfigError
from preflab.lm.replies import by_length, left_pad

# Shorter shared prefixes are not worth a separate pass.
MIN_SHARED = 16


def logsumexp(values: Sequence[float]) -> float:
    """log(sum(exp(v))) without overflow; -inf for no mass at all."""
    top = max(values)
    if top == float("-inf"):
        return top
    return top + math.log(sum(math.exp(v - top) for v in values))


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def next_token_logprobs(
    model,
    tokenizer,
    texts: Sequence[str],
    token_ids: Sequence[int],
    batch_size: int = 8,
    then: Sequence[int] = (),
    share_prefix: bool = True,
) -> list[list[float]]:
    """log p(token | text) for each text and each of `token_ids`: one forward pass per batch.

    The tokens every text starts with (a judge's chat template and rubric) are
    run once, and each batch continues from their cache: only what differs is
    computed per text.

    Args:
        then: token ids appended to every text's own tokens (the start of the
            model's answer, tokenized apart so it cannot merge with the text's end).
        share_prefix: run the shared prefix once (False: every text in full, the
            baseline `bench/bench_judges.py` measures against).
    """
    import torch

    encoded = [_encode(tokenizer, t) + list(then) for t in texts]
    out: list[list[float]] = [[] for _ in encoded]
    wanted = torch.tensor(list(token_ids))
    shared = shared_prefix(encoded) if share_prefix else 0
    prefix = _prefix_cache(model, encoded[0][:shared]) if shared >= MIN_SHARED else None
    if prefix is None:
        shared = 0
    for part in by_length(encoded, batch_size):
        ids, mask, positions = left_pad([encoded[i][shared:] for i in part], tokenizer.pad_token_id, model.device)
        cache = None
        if prefix is not None:
            cache = copy.deepcopy(prefix)
            cache.batch_repeat_interleave(len(part))
            # The suffixes are padded on their left, between the prefix and their first token.
            mask = torch.cat([mask.new_ones((len(part), shared)), mask], dim=1)
            positions = positions + shared
        with torch.inference_mode():
            logits = model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                use_cache=cache is not None,
                **{cache_argument(model): cache},
                logits_to_keep=1,
            ).logits
        logprobs = torch.log_softmax(logits[:, -1, :].float(), dim=-1).cpu()
        for i, row in zip(part, logprobs[:, wanted].tolist()):
            out[i] = row
    return out


def shared_prefix(rows: Sequence[Sequence[int]]) -> int:
    """How many leading tokens every row shares, leaving each row at least one token of its own."""
    if not rows:
        return 0
    limit = min(map(len, rows)) - 1
    n = 0
    while n < limit and all(row[n] == rows[0][n] for row in rows):
        n += 1
    return n


def _prefix_cache(model, prefix: list[int]):
    """The key/value cache of one run over `prefix` (batch of one), or None if the model keeps none."""
    import torch

    ids = torch.tensor([prefix], dtype=torch.long, device=model.device)
    with torch.inference_mode():
        output = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    cache = getattr(output, cache_argument(model), None)
    return cache if hasattr(cache, "batch_repeat_interleave") else None


def cache_argument(model) -> str:
    """The name `model`'s forward takes (and returns) a key/value cache under.

    transformers 5.x calls it `cache`, and warns any user whose code still says
    `past_key_values`; 4.x knows only `past_key_values`. Both take the `DynamicCache`
    a forward pass returns, which `next_token_logprobs` copies and extends.
    """
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def choice_tokens(tokenizer, answer_start: str, choices: Sequence[str]) -> tuple[list[int], list[list[int]]]:
    """(the answer's start, the token ids that spell each choice right after it).

    The start is what `answer_start + choice` shares for every choice as this tokenizer
    spells it: after "Score: ", `Score`, `:` and a lone space where digits stand apart
    (SmolLM2), or only `Score`, `:` where the space joins the digit (" 5" is one token). A
    choice's spellings are the token that follows there plus the single tokens "5" and
    " 5" where they exist, so a model that writes it with or without a space counts the
    same; their probabilities are summed.

    Raises:
        ConfigError: a choice has no single token, or two choices share one.
    """

    def encode(text: str) -> list[int]:
        return _encode(tokenizer, text)

    spelled = [encode(answer_start + choice) for choice in choices]
    shared = 0
    while answer_start and all(len(ids) > shared and ids[shared] == spelled[0][shared] for ids in spelled):
        shared += 1
    variants: list[list[int]] = []
    for choice, ids in zip(choices, spelled):
        options = [ids[shared]] if len(ids) == shared + 1 else []
        for spelling in (choice, f" {choice}"):
            single = encode(spelling)
            if len(single) == 1 and single[0] not in options:
                options.append(single[0])
        if not options:
            raise ConfigError(f"the model's tokenizer has no single token for the answer {choice!r}")
        variants.append(options)
    flat = [i for options in variants for i in options]
    if len(flat) != len(set(flat)):
        raise ConfigError(f"the model's tokenizer spells two of the answers {', '.join(choices)} with the same token")
    return spelled[0][:shared], variants


def choice_logprobs(
    model, tokenizer, texts: Sequence[str], answer_start: str, choices: Sequence[str], batch_size: int = 8
) -> list[dict[str, float]]:
    """log p of each choice as the answer's first token after each text and `answer_start`: one forward pass
    per batch (`next_token_logprobs`), each choice's spellings summed (`choice_tokens`)."""
    start, variants = choice_tokens(tokenizer, answer_start, choices)
    wanted = [i for options in variants for i in options]
    out = []
    for row in next_token_logprobs(model, tokenizer, texts, wanted, batch_size, then=start):
        read, at = {}, 0
        for choice, options in zip(choices, variants):
            read[choice] = logsumexp(row[at : at + len(options)])
            at += len(options)
        out.append(read)
    return out
