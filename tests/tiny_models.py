"""Tiny, randomly initialised transformer models built in-process (no hub), for tests.

    from tests.tiny_models import tiny_causal_lm, tiny_reward_model, fit_completions

- `tiny_tokenizer()`: a byte-level BPE trained in milliseconds on a small corpus (any
  text encodes), with ChatML special tokens and chat template, left padding.
- `tiny_causal_lm(path)` / `tiny_reward_model(path)`: a 2-layer Llama (hidden 32)
  and its one-label sequence-classification twin, saved with the tokenizer, so
  `preflab.lm.loading.load_causal_lm(path)` loads them like any checkpoint.
- `fit_completions(path, examples)`: a few hundred steps of teacher forcing, so a
  tiny model reliably says what a test needs (a fixed verdict, a score, an answer).
- `embedded_model_cache`: a fixture pointing PREFLAB_MODEL_CACHE at one converted
  copy of the embedded SmolLM2 per test run, shared by a parallel run's workers (an
  outer PREFLAB_MODEL_CACHE wins); import it into a test module to use it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

# The tokenizer's special tokens, chat template and corpus: one copy, in bench/ (the reward bench builds the
# same model; benches never import tests/).
from bench.worlds import CHATML, CORPUS, SPECIAL


def _judge_corpus() -> list[str]:
    from preflab.labelling.judges import prompts

    return [prompts.PAIRWISE_SYSTEM, prompts.PAIRWISE_USER, prompts.SCORE_PROMPT, prompts.REFERENCE_PROMPT]


def tiny_tokenizer(vocab_size: int = 700, extra: Sequence[str] = ()):
    """A byte-level BPE tokenizer with a ChatML chat template (pads on the left); `extra` texts join its corpus."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 3 + _judge_corpus() + list(extra), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        unk_token="<|endoftext|>",
        chat_template=CHATML,
        padding_side="left",
    )


def _config(tokenizer, **overrides):
    from transformers import LlamaConfig

    values = {
        "vocab_size": len(tokenizer),
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "bos_token_id": None,
        "tie_word_embeddings": True,
    }
    values.update(overrides)
    return LlamaConfig(**values)


def tiny_causal_lm(path: str | Path, seed: int = 0, tokenizer=None, **config) -> Path:
    """Save a random 2-layer Llama causal LM and its tokenizer to `path`."""
    import torch
    from transformers import LlamaForCausalLM

    tokenizer = tokenizer or tiny_tokenizer()
    torch.manual_seed(seed)
    model = LlamaForCausalLM(_config(tokenizer, **config))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return Path(path)


def tiny_reward_model(path: str | Path, seed: int = 0, tokenizer=None, num_labels: int = 1, **config) -> Path:
    """Save a random 2-layer Llama with a scoring head (one label: a reward model) to `path`."""
    import torch
    from transformers import LlamaForSequenceClassification

    tokenizer = tokenizer or tiny_tokenizer()
    torch.manual_seed(seed)
    model = LlamaForSequenceClassification(_config(tokenizer, num_labels=num_labels, **config))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return Path(path)


def two_head_reward_model(path: str | Path, tokenizer=None, seed: int = 3) -> Path:
    """A multi-objective reward model: two heads named harmlessness and helpfulness (as `train reward --criteria`
    names them), its scoring layer scaled so that replies differ by several reward units."""
    import torch
    from transformers import AutoModelForSequenceClassification

    heads = {0: "harmlessness", 1: "helpfulness"}
    tiny_reward_model(
        path, seed=seed, tokenizer=tokenizer, num_labels=2, id2label=heads, label2id={v: k for k, v in heads.items()}
    )
    model = AutoModelForSequenceClassification.from_pretrained(path)
    with torch.no_grad():
        model.score.weight.mul_(400.0)
    model.save_pretrained(path)
    return Path(path)


def fit_completions(
    path: str | Path, examples: list[tuple[str, str]], steps: int = 150, lr: float = 3e-3, seed: int = 0
) -> Path:
    """Teach the causal LM at `path` to answer each chat prompt with its completion; re-saves it.

    `examples` holds (full prompt text, already chat-formatted, completion); the
    loss covers the completion and its end-of-turn token only.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    rows, labels = [], []
    for prompt, completion in examples:
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        c = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append(p + c)
        labels.append([-100] * len(p) + c)
    width = max(map(len, rows))
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(r)) + r for r in rows])
    lab = torch.tensor([[-100] * (width - len(r)) + r for r in labels])
    mask = (torch.arange(width)[None, :] >= torch.tensor([width - len(r) for r in rows])[:, None]).long()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=ids, attention_mask=mask, labels=lab).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    model.save_pretrained(path)
    return Path(path)


def shared_model_cache(tmp_path_factory) -> Path:
    """The run's one model cache, with the embedded model converted into it (29 s on the Intel draw): the first
    worker to ask converts under a lock, the others wait and read it. An outer PREFLAB_MODEL_CACHE wins."""
    from filelock import FileLock

    from preflab.lm.loading import embedded_model
    from preflab.settings import DEFAULT_MODEL

    if os.environ.get("PREFLAB_MODEL_CACHE"):
        cache = Path(os.environ["PREFLAB_MODEL_CACHE"])
    else:  # a parallel run's workers have folders of their own under the run's: the cache goes beside them
        base = tmp_path_factory.getbasetemp()
        cache = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "model-cache"
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(cache / ".converting.lock"), pytest.MonkeyPatch.context() as patch:
        patch.setenv("PREFLAB_MODEL_CACHE", str(cache))
        embedded_model(DEFAULT_MODEL)  # converted once a run; written to a folder beside it and renamed into place
    return cache


@pytest.fixture
def embedded_model_cache(tmp_path_factory, monkeypatch) -> Path:
    """Point PREFLAB_MODEL_CACHE at the run's one converted copy of the embedded model (`shared_model_cache`)."""
    cache = shared_model_cache(tmp_path_factory)
    monkeypatch.setenv("PREFLAB_MODEL_CACHE", str(cache))
    return cache
