"""A reply's tokens after its conversation, and their log-probabilities: the one rule every engine scores by.

The conversation is rendered with the model's chat template twice, as vLLM renders a chat
request: up to where the assistant answers (`add_generation_prompt`), and with the reply as
the open last assistant turn (`continue_final_message`). Each text is tokenized whole. The
reply's tokens are the second's after the longest prefix the two share, as TRL's DPOTrainer
splits a completion from its prompt (`preflab.lm.scoring.completion_split`). So:

- a token the tokenizer merges across the seam (the template's newline and a reply that
  starts with newlines) is the reply's, and scored in its context, as a server scores it;
- a character spelled by several byte tokens (an emoji, CJK, a reply cut mid-character that
  ends in U+FFFD) is scored whole, however a server decodes its pieces;
- trailing spaces, `\\n\\n` and the template's own markers in a reply are the reply's, as the
  template renders them.

The openai engine asks vLLM for the token ids of both renderings (`lm.engines.wire`) and
applies `reply_start` to them; the transformers engine and the in-process likelihood judge
tokenize here: both score the same tokens, so their scores agree to float noise.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from preflab.db.conversation import Messages, user_turn
from preflab.db.store import chunks


def reply_start(context: Sequence, whole: Sequence) -> int:
    """Where the reply's tokens begin in `whole`: after the longest prefix it shares with `context`'s tokens
    (or characters, given text)."""
    n, limit = 0, min(len(context), len(whole))
    while n < limit and context[n] == whole[n]:
        n += 1
    return n


def rendered(tokenizer, prompt: str | Messages, reply: str) -> tuple[str, str]:
    """(the conversation up to the reply, the conversation with the reply as its open last turn), as text."""
    history = user_turn(prompt) if isinstance(prompt, str) else [dict(m) for m in prompt]
    context = tokenizer.apply_chat_template(history, tokenize=False, add_generation_prompt=True)
    whole = tokenizer.apply_chat_template(
        [*history, {"role": "assistant", "content": reply}], tokenize=False, continue_final_message=True
    )
    return context, whole


def split_tokens(tokenizer, context: str, whole: str) -> tuple[list[int], int]:
    """(`whole`'s token ids, how many of its last are the reply's): `whole` continues the text `context`."""

    def encode(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    ids = encode(whole)
    # The first token has nothing before it to be scored after: a template that renders nothing first gives none.
    return ids, len(ids) - max(reply_start(encode(context), ids), min(1, len(ids)))


def reply_tokens(tokenizer, prompt: str | Messages, reply: str) -> tuple[list[int], int]:
    """(the conversation and reply's token ids, how many of its last are the reply's): see the module."""
    return split_tokens(tokenizer, *rendered(tokenizer, prompt, reply))


def by_length(rows: Sequence[Sequence[int]], size: int) -> Iterator[list[int]]:
    """Indices of `rows` in batches of similar length, so little of a batch is padding."""
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    for part in chunks(order, size):
        yield list(part)


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, device):
    """(ids, attention mask, positions) of `rows` padded on their left, so every row ends at the last position."""
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


def reply_logprobs(
    model, rows: Sequence[tuple[Sequence[int], int]], pad_id: int, batch_size: int = 8
) -> list[tuple[float, int]]:
    """(sum of log p of each row's last n tokens given everything before, n) for each (ids, n) row.

    Rows are padded on the left, so the scored tokens are the last positions of every row and
    `logits_to_keep` skips the vocabulary projection everywhere else.
    """
    import torch

    out: list[tuple[float, int]] = [(0.0, 0)] * len(rows)
    for part in by_length([ids for ids, _ in rows], batch_size):
        lengths = [rows[i][1] for i in part]
        keep = max(lengths) + 1
        ids, mask, positions = left_pad([rows[i][0] for i in part], pad_id, model.device)
        with torch.inference_mode():
            logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep).logits
        # logits[:, k] predicts the token after position (width - keep + k).
        logprobs = torch.log_softmax(logits[:, :-1, :].float(), dim=-1)
        targets = ids[:, -(keep - 1) :] if keep > 1 else ids[:, :0]
        picked = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1).cpu()
        for row, (i, n) in enumerate(zip(part, lengths)):
            out[i] = (float(picked[row, picked.shape[1] - n :].sum()) if n else 0.0, n)
    return out
