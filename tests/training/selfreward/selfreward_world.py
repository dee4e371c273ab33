"""The digit toy world, set up for the self-rewarding loop.

    from tests.training.selfreward.selfreward_world import toy_world, one_torch_thread, human_rankings_of

- M_0: a copy of `tests.toy_data.toy_base` whose chat template is the identity
  (a digit prompt is its own chat text), so the loop's chat-formatted sampling,
  DPO and evaluation see exactly the digit sentences the model knows.
- The judge: a one-label reward model of the hidden preference (a 16-token
  digit LM cannot grade with the 5-point prompt), named with `--judge reward-model`.
- Prompt files: a pool the loop takes its new prompts from (the toy LM cannot
  write prompts few-shot) and held-out prompts for the evaluation.
- `human_rankings_of`: the simulated annotator ranks an iteration's candidates,
  written as a JSON Lines file for `preflab import rankings`.

Built once per test session (cached under the session's base temp folder).
`one_torch_thread`: tiny models run faster on one thread; use it in the tests.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select

from tests.toy_data import toy_base  # noqa: F401 (fixture)

# A digit prompt renders as itself; an answer follows after a space and ends with EOS.
IDENTITY_CHAT = (
    "{% for m in messages %}{% if m['role'] == 'assistant' %}{{ ' ' + m['content'] + eos_token }}"
    "{% else %}{{ m['content'] }}{% endif %}{% endfor %}"
)

# DPO as the toy demo trains it (RPO keeps the EOS after four digits), sized for a few hundred pairs.
TOY_DPO = [
    "--loss-type",
    "sigmoid,sft",
    "--beta",
    0.1,
    "--learning-rate",
    2e-3,
    "--num-train-epochs",
    4,
    "--per-device-train-batch-size",
    16,
    "--max-length",
    16,
    "--use-cpu",
    "--logging-steps",
    5,
    "--save-steps",
    10_000,
    "--warmup-steps",
    0.1,
]
# Loop settings for the toy: prompts from the pool, 4 candidates of 4 digits + EOS, the reward-model judge.
TOY_LOOP = ["--n", 6, "--max-new-tokens", 5, "--eval-max-new-tokens", 5, "--batch-size", 64, "--judge", "reward-model"]


@dataclass
class ToyWorld:
    base: Path  # M_0
    reward_model: Path  # the judge
    pool: Path  # JSON Lines prompts the loop takes new prompts from
    eval_prompts: Path  # JSON Lines held-out prompts
    eval_digits: list[list[int]]

    def loop_args(self, prompts_per_iteration: int = 160) -> list:
        return [
            "--model",
            self.base,
            "--judge-model",
            self.reward_model,
            "--prompt-pool",
            self.pool,
            "--eval-prompts",
            self.eval_prompts,
            "--prompts-per-iteration",
            prompts_per_iteration,
            *TOY_LOOP,
            *TOY_DPO,
        ]


def _write_prompts(path: Path, prompts: list[list[int]]) -> Path:
    from preflab.training.demos import toy_world as toy

    path.write_text("".join(json.dumps({"prompt": toy.prompt_text(p)}) + "\n" for p in prompts), encoding="utf-8")
    return path


def train_toy_judge(path: Path, steps: int = 300, seed: int = 0) -> Path:
    """A reward model of the hidden preference, trained on a fresh stream of (preferred, other) pairs.

    An unlimited stream of pairs teaches a tiny model the rule in seconds (the
    store-based trainer would need a thousand ranked prompts for the same); the
    loop under test reads it only through the reward-model judge.
    """
    import torch
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from preflab.training.demos import toy_world as toy

    tokenizer = toy.digit_tokenizer()
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = LlamaForSequenceClassification(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=4,
            max_position_embeddings=16,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            bos_token_id=None,
            num_labels=1,
        )
    )

    def sample(prompt, preferred: bool):
        while True:
            output = toy.sample_output(rng, prompt)
            if (output[0] == toy.preferred_first(prompt)) == preferred:
                return toy.encode(prompt, output)

    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / steps)
    model.train()
    for _ in range(steps):
        prompts = [toy.sample_prompt(rng) for _ in range(64)]
        ids = torch.tensor([sample(p, True) for p in prompts] + [sample(p, False) for p in prompts])
        rewards = model(input_ids=ids).logits.squeeze(-1)
        loss = -torch.nn.functional.logsigmoid(rewards[:64] - rewards[64:]).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    model.eval()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _build(root: Path, base: Path) -> ToyWorld:
    from transformers import AutoTokenizer

    from preflab.training.demos import toy_world as toy

    m0 = root / "m0"
    shutil.copytree(base, m0)
    tokenizer = AutoTokenizer.from_pretrained(m0)
    tokenizer.chat_template = IDENTITY_CHAT
    tokenizer.save_pretrained(m0)
    judge = train_toy_judge(root / "judge")

    rng = random.Random(11)
    prompts: dict[tuple, None] = {}
    while len(prompts) < 420:
        prompts[tuple(toy.sample_prompt(rng))] = None
    ordered = [list(p) for p in prompts]
    eval_digits = ordered[:20]
    world = ToyWorld(
        m0,
        judge.resolve(),
        _write_prompts(root / "pool.jsonl", ordered[20:]),
        _write_prompts(root / "eval.jsonl", eval_digits),
        eval_digits,
    )
    (root / "world.json").write_text(
        json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in world.__dict__.items()}), encoding="utf-8"
    )
    return world


@pytest.fixture(scope="session")
def toy_world(tmp_path_factory, toy_base) -> ToyWorld:
    root = tmp_path_factory.getbasetemp() / "selfreward-toy"
    marker = root / "world.json"
    if marker.exists():  # another test module built it in this session
        data = json.loads(marker.read_text(encoding="utf-8"))
        return ToyWorld(**{k: Path(v) if isinstance(v, str) else v for k, v in data.items()})
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: more threads only add synchronisation
    try:
        return _build(root, toy_base)
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def one_torch_thread():
    """Tiny models train and sample faster on one thread (more only add synchronisation)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def human_rankings_of(sessions, iteration: int, path: Path) -> int:
    """The simulated annotator ranks iteration `iteration`'s candidates; writes them for `import rankings`."""
    from preflab.db.models import Candidate, Prompt
    from preflab.training.demos import toy_world as toy

    with sessions.begin() as session:
        rows = session.execute(
            select(Prompt.id, Prompt.text, Candidate.text)
            .join(Candidate, Candidate.prompt_id == Prompt.id)
            .where(Candidate.iteration == iteration)
            .order_by(Prompt.id, Candidate.id)
        ).all()
    by_prompt: dict[int, tuple[str, list[str]]] = {}
    for pid, prompt, text in rows:
        by_prompt.setdefault(pid, (prompt, []))[1].append(text)
    lines = []
    for pid, (prompt, texts) in by_prompt.items():
        tiers = toy.annotator_tiers(toy.parse_digits(prompt), [toy.parse_digits(t) for t in texts])
        if len(tiers) > 1:
            lines.append(
                json.dumps(
                    {
                        "prompt": prompt,
                        "responses": texts,
                        "ranking": tiers,
                        "annotator": "simulated-annotator",
                        "annotator_kind": "human",
                        "id": f"iteration-{iteration}-prompt-{pid}",
                    }
                )
            )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)
