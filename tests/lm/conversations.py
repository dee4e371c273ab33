"""Two conversations that differ only in their history, a tiny model that answers each by it, and a recorder.

    from tests.lm.conversations import FRANCE, ITALY, tutor_lm, recorded_inputs

- `FRANCE` and `ITALY`: a system prompt, an earlier exchange, then the same last user
  message ("What is its capital?"). A model that reads only the last turn sees the
  same prompt twice; one that reads the history answers "Paris." to the first and
  "Rome." to the second.
- `history_lm(path)`: a tiny causal LM taught exactly that through the chat template;
  `tutor_lm`, a fixture: one such model per test session.
- `recorded_inputs(model, tokenizer)`: every sequence a real model's forward pass read,
  decoded (padding left out), so a test can check that the history reached the model.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.tiny_models import fit_completions, tiny_causal_lm

LAST = "What is its capital?"
FRANCE = [
    {"role": "system", "content": "You are a tutor on France."},
    {"role": "user", "content": "Tell me about the country."},
    {"role": "assistant", "content": "It lies in western Europe."},
    {"role": "user", "content": LAST},
]
ITALY = [
    {"role": "system", "content": "You are a tutor on Italy."},
    {"role": "user", "content": "Tell me about the country."},
    {"role": "assistant", "content": "It lies in southern Europe."},
    {"role": "user", "content": LAST},
]
ANSWERS = {"France": "Paris.", "Italy": "Rome."}


def history_lm(path: str | Path) -> Path:
    """A tiny causal LM that answers FRANCE with "Paris." and ITALY with "Rome." (its chat template)."""
    from transformers import AutoTokenizer

    from preflab.lm.loading import chat_prompt

    path = tiny_causal_lm(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    return fit_completions(
        path, [(chat_prompt(tokenizer, FRANCE), "Paris."), (chat_prompt(tokenizer, ITALY), "Rome.")], steps=80, lr=1e-2
    )


@pytest.fixture(scope="session")
def tutor_lm(tmp_path_factory) -> Path:
    """`history_lm`, fitted once per test session."""
    return history_lm(tmp_path_factory.mktemp("tutor") / "tutor")


def rankings_file(path: Path, responses=("Paris.", "Rome.")) -> Path:
    """A rankings file of both conversations, each with the same replies (ranked by a person), with references."""
    path.write_text(
        "".join(
            json.dumps(
                {
                    "prompt": turns,
                    "responses": list(responses),
                    "ranking": [[0], [1]],
                    "reference": ANSWERS[name],
                    "annotator": "alice",
                    "id": name,
                }
            )
            + "\n"
            for name, turns in (("France", FRANCE), ("Italy", ITALY))
        ),
        encoding="utf-8",
    )
    return path


def shown_history(turns) -> list[str]:
    """What must reach a model of a conversation: each of its messages' contents."""
    return [t["content"] for t in turns]


@contextmanager
def recorded_inputs(model, tokenizer):
    """Record the text of every row each forward pass of `model` reads (a list, filled while inside).

    A pass that continues from a key/value cache (the judges run a prefix shared by all
    their prompts once) is recorded after the text of the pass that made the cache; a step
    of generation (one token read beside the cache of its own row) is recorded alone.
    """
    seen: list[str] = []
    made_cache = [""]
    pad = tokenizer.pad_token_id

    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            return
        cache = kwargs.get("cache", kwargs.get("past_key_values"))  # its name from transformers 5.x, and before
        continues = cache is not None and cache.get_seq_length() > 0 and ids.shape[1] > 1
        before = made_cache[0] if continues else ""
        for row in ids.tolist():
            seen.append(before + tokenizer.decode([t for t in row if t != pad]))
        if not before:
            made_cache[0] = seen[-1]

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()
