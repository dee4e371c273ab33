"""Batched forward passes the judges read scores from, without decoding any text.

Sequences are padded on the left, so every sequence ends at the last position:
the next-token distribution is the last position's, and a response's tokens are
the last positions. That lets `logits_to_keep` skip the vocabulary projection
everywhere else. Next-token reads run the prefix that all texts share (a judge's
rubric) once and reuse its key/value cache. A response's tokens are the ones a
server scores (`preflab.lm.replies`, where its forward pass is).
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Sequence

from preflab.db.conversation import Messages
from preflab.lm.replies import by_length, left_pad, reply_logprobs, reply_tokens, split_tokens

# by_length is read from here by the pairwise judge.
__all__ = ["by_length", "logsumexp", "next_token_logprobs", "response_logprobs", "shared_prefix"]

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


def response_logprobs(
    model, tokenizer, contexts: Sequence[str | Messages], responses: Sequence[str], batch_size: int = 8
) -> list[tuple[float, int]]:
    """(sum of log p(response token | everything before), number of response tokens) per pair.

    A context given as messages is rendered with the reply as its open last turn, as a server
    renders it; one given as text is joined with the reply as text. Either way the whole is
    tokenized at once and the reply's tokens are those after what it shares with the context's
    own (`preflab.lm.replies`), so a server scoring the same conversation scores the same tokens.
    """
    rows = [
        split_tokens(tokenizer, c, c + r) if isinstance(c, str) else reply_tokens(tokenizer, c, r)
        for c, r in zip(contexts, responses)
    ]
    return reply_logprobs(model, rows, tokenizer.pad_token_id, batch_size)
