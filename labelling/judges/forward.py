"""Batched forward passes the judges read scores from, without decoding any text.

Sequences are padded on the left, so every sequence ends at the last position:
the next-token distribution is the last position's, and a response's tokens are
the last `len(response)` positions. That lets `logits_to_keep` skip the
vocabulary projection everywhere else. Next-token reads run the prefix that all
texts share (a judge's rubric) once and reuse its key/value cache.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Sequence

# Shorter shared prefixes are not worth a separate pass.
MIN_SHARED = 16


def batches(n: int, size: int) -> Iterator[range]:
    for start in range(0, n, size):
        yield range(start, min(n, start + size))


def by_length(rows: Sequence[Sequence[int]], size: int) -> Iterator[list[int]]:
    """Indices of `rows` in batches of similar length, so little of a batch is padding."""
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    for part in batches(len(order), size):
        yield [order[i] for i in part]


def logsumexp(values: Sequence[float]) -> float:
    """log(sum(exp(v))) without overflow; -inf for no mass at all."""
    top = max(values)
    if top == float("-inf"):
        return top
    return top + math.log(sum(math.exp(v - top) for v in values))


def _left_pad(rows: Sequence[Sequence[int]], pad_id: int, device):
    import torch

    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row) :] = 1
    # Explicit positions, so models with absolute position embeddings see no shift.
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


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
        ids, mask, positions = _left_pad([encoded[i][shared:] for i in part], tokenizer.pad_token_id, model.device)
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
                past_key_values=cache,
                use_cache=cache is not None,
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
        cache = model(input_ids=ids, use_cache=True, logits_to_keep=1).past_key_values
    return cache if hasattr(cache, "batch_repeat_interleave") else None


def response_logprobs(
    model, tokenizer, contexts: Sequence[str], responses: Sequence[str], batch_size: int = 8
) -> list[tuple[float, int]]:
    """(sum of log p(response token | everything before), number of response tokens) per pair.

    Context and response are tokenized apart and joined, so the response's tokens
    are exactly the ones scored whatever the tokenizer would merge at the seam.
    """
    import torch

    pairs = [(_encode(tokenizer, c), _encode(tokenizer, r)) for c, r in zip(contexts, responses)]
    out: list[tuple[float, int]] = [(0.0, 0)] * len(pairs)
    for part in by_length([c + r for c, r in pairs], batch_size):
        rows = [pairs[i][0] + pairs[i][1] for i in part]
        lengths = [len(pairs[i][1]) for i in part]
        keep = max(lengths) + 1
        ids, mask, positions = _left_pad(rows, tokenizer.pad_token_id, model.device)
        with torch.inference_mode():
            logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep).logits
        # logits[:, k] predicts the token after position (width - keep + k).
        logprobs = torch.log_softmax(logits[:, :-1, :].float(), dim=-1)
        targets = ids[:, -(keep - 1) :] if keep > 1 else ids[:, :0]
        picked = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1).cpu()
        for row, (i, n) in enumerate(zip(part, lengths)):
            out[i] = (float(picked[row, picked.shape[1] - n :].sum()) if n else 0.0, n)
    return out
