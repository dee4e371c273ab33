"""The pair ranker: a cross-encoder that reads (prompt, A, B) as one sequence and predicts P(A ≻ B).

PairRM-style (Jiang et al. 2023, the RLHF lecture's PairRM section): one forward
pass reads the prompt and both responses together, so the model can compare them
directly instead of scoring each alone as a reward model does. As in PairRM, the
sequence gives each response a score of its own, read at the response's last
token (its EOS) by a one-label head, and the pair's score is their difference:
s(A, B) = g(A's EOS) − g(B's EOS). The prediction is antisymmetrised over the
two orders:

    P(A ≻ B) = σ(s(A, B) − s(B, A))

so P(A ≻ B) + P(B ≻ A) = 1 holds exactly, for every pair, and the position each
response is shown in cannot bias the verdict. Both orders are read in one batch.
With a causal backbone A's score is read before B is seen, so the model holds a
Bradley–Terry reward model as a special case; B's score (and, in the other order,
A's) is read after the other response, which is where the comparison comes in.
The backbone is a one-label sequence classifier with a `score` head: a causal LM
with a fresh head (the embedded SmolLM2), a reward model, or an earlier ranker.

A sequence is the prompt, then A and its EOS, then B and its EOS, each part
tokenized on its own (so a response's tokens do not depend on what precedes it).
When it is longer than the ranker's `max_length`, the prompt keeps its end and the
two responses are cut alike. A saved ranker is a sequence classifier folder with a
`pair_ranker.json` beside its weights holding that format, its max length and
whether it reads chat messages. A prompt of messages (the whole history: system
prompt, earlier turns) goes through the chat template; a reply of several turns
is read as the template writes its turns after the prompt.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from preflab.db.conversation import transcript
from preflab.db.store import chunks
from preflab.errors import ConfigError
from preflab.lm.scoring import Text, _device, _right_pad, pad_id

FORMAT_FILE = "pair_ranker.json"
FORMAT = "prompt+A+eos+B+eos"


def _prompt_text(tokenizer, prompt: Text) -> str:
    """The prompt as the ranker reads it: its text, or its messages (the whole history) through the chat template."""
    if not isinstance(prompt, list):
        return prompt
    return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)


def _response_text(tokenizer, prompt: Text, response: Text) -> str:
    """A response as the ranker reads it: its text, or one message's content.

    A reply of several turns is what the chat template writes after the prompt's
    generation prompt, up to its last message's content (the EOS is added after it
    as after any response); without a prompt of messages, its transcript.
    """
    if not isinstance(response, list):
        return response
    if len(response) == 1:
        return response[0].get("content") or ""
    if not isinstance(prompt, list):
        return transcript(response)
    head = _prompt_text(tokenizer, prompt)
    before_last = tokenizer.apply_chat_template(prompt + response[:-1], tokenize=False, add_generation_prompt=True)
    if not before_last.startswith(head):
        return transcript(response)
    return before_last[len(head) :] + (response[-1].get("content") or "")


def _eos(tokenizer) -> int:
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    if eos is None:
        raise ConfigError("the pair ranker's tokenizer has no EOS or SEP token to end each response with")
    return eos


def _cut(head: list[int], a: list[int], b: list[int], max_length: int | None) -> tuple[list[int], list[int], list[int]]:
    """Fit head + a + b (each response ending in its EOS) into max_length, treating a and b alike."""
    if max_length is None or len(head) + len(a) + len(b) <= max_length:
        return head, a, b
    head_room = max(max_length - len(a) - len(b), max_length // 3)
    head = head[len(head) - head_room :] if len(head) > head_room else head
    room = max(max_length - len(head), 2)
    if len(a) + len(b) <= room:
        return head, a, b
    cap = room // 2
    # The shorter response keeps all of its tokens when it fits in half; the longer one takes what is left.
    if len(a) <= cap:
        cap_a, cap_b = len(a), room - len(a)
    elif len(b) <= cap:
        cap_a, cap_b = room - len(b), len(b)
    else:
        cap_a = cap_b = cap
    return head, a[: cap_a - 1] + a[-1:], b[: cap_b - 1] + b[-1:]


def pair_ids(
    tokenizer, prompt: Text, first: Text, second: Text, max_length: int | None = None
) -> tuple[list[int], int]:
    """One (prompt, A, B) sequence, at most `max_length` long: (token ids, the index of A's EOS).

    The ids are the prompt, A, EOS, B, EOS; B's EOS is the last token.
    """
    eos = _eos(tokenizer)
    head = list(tokenizer(_prompt_text(tokenizer, prompt))["input_ids"])
    a = [*list(tokenizer(_response_text(tokenizer, prompt, first), add_special_tokens=False)["input_ids"]), eos]
    b = [*list(tokenizer(_response_text(tokenizer, prompt, second), add_special_tokens=False)["input_ids"]), eos]
    head, a, b = _cut(head, a, b, max_length)
    return head + a + b, len(head) + len(a) - 1


def pair_logits(model, input_ids, attention_mask, a_end):
    """s(A, B) = g(A's EOS) − g(B's EOS) for a right-padded batch of sequences (a tensor, one per row).

    Args:
        a_end: a tensor with the index of A's EOS in each row (B's EOS is the row's last real token).
    """
    import torch

    head = getattr(model, "score", None)
    if head is None:
        raise ConfigError(
            "a pair ranker needs a sequence classifier with a `score` head (a causal LM such as "
            "the embedded SmolLM2, or a reward model trained from one)"
        )
    hidden = model(
        input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, use_cache=False
    ).hidden_states[-1]
    rows = torch.arange(input_ids.shape[0], device=input_ids.device)
    b_end = attention_mask.sum(-1) - 1
    ends = hidden[torch.stack([rows, rows]), torch.stack([a_end.to(rows.device), b_end])]  # (2, batch, hidden)
    g = head(ends).squeeze(-1).float()
    return g[0] - g[1]


def write_format(model_dir: str | Path, max_length: int | None, conversational: bool = False) -> None:
    """Mark a saved sequence classifier as a pair ranker, with the input format it was trained on."""
    settings = {"format": FORMAT, "max_length": max_length, "conversational": conversational}
    (Path(model_dir) / FORMAT_FILE).write_text(json.dumps(settings) + "\n", encoding="utf-8")


def read_format(location: str | Path) -> dict[str, Any]:
    """The `pair_ranker.json` of a saved pair ranker; a clear error for any other model."""
    path = Path(location) / FORMAT_FILE
    if not path.is_file():
        raise ConfigError(
            f"{location} is not a pair ranker (it has no {FORMAT_FILE}); train one with `preflab train pair-ranker`"
        )
    settings = json.loads(path.read_text(encoding="utf-8"))
    if settings.get("format") != FORMAT:
        raise ConfigError(f"{location} holds a pair ranker of an unknown format {settings.get('format')!r}")
    return settings


def ranker_format(model) -> dict[str, Any]:
    """The format a loaded pair ranker was trained with (read from the folder it was loaded from)."""
    if getattr(model.config, "num_labels", None) != 1:
        raise ConfigError("a pair ranker is a one-label sequence classifier; this model is not one")
    return read_format(model.name_or_path)


def load_pair_ranker(name_or_path: str | Path, *, device: str | None = None, dtype: Any = None):
    """Load a saved pair ranker: (model, tokenizer, its format: max_length and conversational)."""
    from preflab.lm.loading import load_sequence_scorer, resolve_model_path

    read_format(resolve_model_path(name_or_path))
    model, tokenizer = load_sequence_scorer(name_or_path, device=device, dtype=dtype)
    return model, tokenizer, ranker_format(model)


def pair_scores(model, tokenizer, sequences: Sequence[tuple[list[int], int]], batch_size: int = 32) -> list[float]:
    """s(A, B) of each sequence from `pair_ids` (batched shortest first, right-padded)."""
    import torch

    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i][0]))
    out = [0.0] * len(sequences)
    device = _device(model)
    model.eval()
    with torch.no_grad():
        for batch in chunks(order, batch_size):
            ids, mask = _right_pad([sequences[i][0] for i in batch], pad_id(tokenizer))
            a_end = torch.tensor([sequences[i][1] for i in batch], dtype=torch.long)
            for i, value in zip(batch, pair_logits(model, ids.to(device), mask.to(device), a_end).tolist()):
                out[i] = value
    return out


def order_scores(
    model,
    tokenizer,
    prompts: Sequence[Text],
    firsts: Sequence[Text],
    seconds: Sequence[Text],
    max_length: int | None = None,
    batch_size: int = 32,
) -> tuple[list[float], list[float]]:
    """(s(first, second), s(second, first)) for each (prompt, first, second): both orders, read in one batch.

    Each order's own verdict: s > 0 prefers the response shown first.
    """
    n = len(prompts)
    sequences = [pair_ids(tokenizer, p, a, b, max_length) for p, a, b in zip(prompts, firsts, seconds)]
    sequences += [pair_ids(tokenizer, p, b, a, max_length) for p, a, b in zip(prompts, firsts, seconds)]
    scores = pair_scores(model, tokenizer, sequences, batch_size)
    return scores[:n], scores[n:]


def preferences(forward: Sequence[float], backward: Sequence[float]) -> list[float]:
    """P(first ≻ second) = σ(s(first, second) − s(second, first)) from `order_scores`."""
    return [_sigmoid(a - b) for a, b in zip(forward, backward)]


def preference_probabilities(
    model,
    tokenizer,
    prompts: Sequence[Text],
    firsts: Sequence[Text],
    seconds: Sequence[Text],
    max_length: int | None = None,
    batch_size: int = 32,
) -> list[float]:
    """P(first ≻ second) = σ(s(first, second) − s(second, first)) for each (prompt, first, second)."""
    return preferences(*order_scores(model, tokenizer, prompts, firsts, seconds, max_length, batch_size))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def ranker_accuracy(
    model, tokenizer, split, max_length: int | None = None, batch_size: int = 32
) -> dict[str, float | int | None]:
    """Held-out numbers of a pair ranker: the share of pairs with P(chosen ≻ rejected) > ½, and more."""
    n = len(split)
    if not n:
        return {"accuracy": None, "pairs": 0, "mean_probability": None, "log_loss": None}
    probs = preference_probabilities(
        model, tokenizer, list(split["prompt"]), list(split["chosen"]), list(split["rejected"]), max_length, batch_size
    )
    return {
        "accuracy": sum(p > 0.5 for p in probs) / n,
        "pairs": n,
        "mean_probability": sum(probs) / n,
        "log_loss": -sum(math.log(max(p, 1e-12)) for p in probs) / n,
    }
