"""What the benchmarks run against, built here so that no bench imports from tests/.

- `simulate` / `winners`: battles drawn from known strengths (bench_leaderboard.py and the
  leaderboard's tests);
- `tiny_reward_model`: a random 2-layer Llama reward model with a ChatML tokenizer
  (bench_reward_eval.py), the same model tests/tiny_models.py builds for the same seed;
- `free_port`: a loopback port for a server a bench starts (bench_engine_client.py, bench_engine_vllm.py,
  bench_serve.py).

The tests import these from here (tests/db/leaderboard/simulate.py, fastchat_reference.py,
tests/tiny_models.py): one copy, so a figure measured before the move still compares with one
measured after it. numpy, torch and transformers are imported
where they are used: bench_engine_client.py reads its own peak RSS.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

TIE_RATES = (0.03, 0.08, 0.15)  # one per annotator: several annotators, some tie more


def simulate(strengths, n_battles: int, rng: np.random.Generator, tie_rates=TIE_RATES):
    """(a, b, outcome, annotator): model indices, a's result (1, 0.5, 0) and who judged, per battle.

    A battle is a tie with its annotator's tie rate, else a win drawn so that a's expected
    score (wins plus half the ties) is exactly Bradley–Terry's 1 / (1 + 10^((s_b − s_a) / 400)).
    """
    import numpy as np

    strengths = np.asarray(strengths, dtype=np.float64)
    n = len(strengths)
    a = rng.integers(0, n, n_battles)
    b = (a + rng.integers(1, n, n_battles)) % n
    annotator = rng.integers(0, len(tie_rates), n_battles)
    tie = np.asarray(tie_rates)[annotator]
    p = 1.0 / (1.0 + 10.0 ** ((strengths[b] - strengths[a]) / 400.0))
    win = (p - tie / 2) / (1 - tie)  # P(a wins | no tie); needs tie/2 <= p <= 1 - tie/2
    assert (win >= 0).all() and (win <= 1).all(), "a tie rate too high for these strengths"
    outcome = np.where(rng.random(n_battles) < tie, 0.5, (rng.random(n_battles) < win).astype(np.float64))
    return a, b, outcome, annotator


def winners(outcome, rng: np.random.Generator | None = None) -> list[str]:
    """Chatbot Arena's `winner` column for outcomes; ties split between its two kinds."""
    import numpy as np

    ties = ("tie", "tie (bothbad)")
    draw = rng.integers(0, 2, len(outcome)) if rng is not None else np.zeros(len(outcome), dtype=int)
    return ["model_a" if o == 1.0 else "model_b" if o == 0.0 else ties[d] for o, d in zip(outcome, draw)]


SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "What is the capital of France? The capital of France is Paris.",
    "How many legs does a spider have? A spider has eight legs.",
    "Write a short poem about the sea. The sea is wide and blue and deep.",
    "Explain why the sky is blue. Sunlight scatters off the air, and blue light scatters most.",
    "good bad answer response question user assistant judge score points reference",
    'Which assistant\'s answer is better? Reply with one letter: "A" or "B". A B',
    "Score: 0 Score: 1 Score: 2 Score: 3 Score: 4 Score: 5",
]


def tiny_tokenizer(vocab_size: int = 700):
    """A byte-level BPE tokenizer with a ChatML chat template (pads on the left)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from preflab.labelling.judges import prompts

    # The judges' prompts are in the corpus as in the tests' tokenizer: the same merges, the same lengths.
    judge_corpus = [prompts.PAIRWISE_SYSTEM, prompts.PAIRWISE_USER, prompts.SCORE_PROMPT, prompts.REFERENCE_PROMPT]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 3 + judge_corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        unk_token="<|endoftext|>",
        chat_template=CHATML,
        padding_side="left",
    )


def tiny_reward_model(path: str | Path, seed: int = 0) -> Path:
    """Save a random 2-layer Llama (hidden 32) with a one-label scoring head, and its tokenizer, to `path`."""
    import torch
    from transformers import LlamaConfig, LlamaForSequenceClassification

    tokenizer = tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
        num_labels=1,
    )
    torch.manual_seed(seed)
    model = LlamaForSequenceClassification(config)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return Path(path)


def free_port() -> int:
    """A loopback port free now (the stub server binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
