"""RL step throughput: TRL's RLOOTrainer as `preflab train rl` runs it, against a plain-PyTorch loop.

Usage: python bench/bench_rl.py [--steps 12] [--warmup 2] [--prompts 8] [--n 4] [--completion 32] [--threads 2]
       python bench/bench_rl.py --gpu      # ~0.5B policy and reward model on CUDA (exits 0 without a GPU)

CPU mode, both sides in this process, on the same models and prompts:

- preflab: `RLTrainConfig(...).to_trl()` into TRL's `RLOOTrainer`, with preflab's
  reward-model reward function (`preflab.training.rl.RewardModelReward`);
- baseline: a REINFORCE-with-KL loop like the minimal-RLHF notebook's, in plain
  PyTorch: sample n completions per prompt, score them with the reward model, the
  sequence KL to the frozen reference, R = R_RM − β·KL, the leave-one-out
  baseline, one AdamW step on −A·log π. (The notebook's PPO clip over one epoch
  of one batch is the same gradient.)

Models: a random 4-layer Llama (hidden 128, vocab 512, a WordLevel tokenizer built
in-process) as policy and reference, its one-label twin as the reward model.
Completions are forced to --completion tokens on both sides (min_new_tokens), so
both do the same work per step. Steps after --warmup are timed.

GPU mode (`--gpu`): a Qwen2.5-0.5B-shaped random policy (~0.49 B parameters) and
reward model, bf16, RLOO for --steps steps of --prompts × --n completions of
--completion tokens: generation tokens/s (the policy's `generate` on one step's
batch, timed apart), training tokens/s (TRL's `num_tokens` over the training
time) and peak GPU memory.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def word_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    vocab.update({f"w{i}": i + 3 for i in range(vocab_size - 3)})
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="</s>", unk_token="<unk>", padding_side="left"
    )


def build(workdir: Path, gpu: bool, seed: int = 0) -> tuple[Path, Path, list[str]]:
    """Save a random policy and reward model; return their folders and the prompts."""
    import torch
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        LlamaForSequenceClassification,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen2ForSequenceClassification,
    )

    vocab = 151_936 if gpu else 512
    tokenizer = word_tokenizer(vocab)
    common = {
        "vocab_size": vocab,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "bos_token_id": None,
        "max_position_embeddings": 2048,
    }
    if gpu:
        config = Qwen2Config(
            hidden_size=896,
            intermediate_size=4864,
            num_hidden_layers=24,
            num_attention_heads=14,
            num_key_value_heads=2,
            tie_word_embeddings=True,
            **common,
        )
        classes = (Qwen2ForCausalLM, Qwen2ForSequenceClassification)
    else:
        config = LlamaConfig(
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=4,
            tie_word_embeddings=False,
            **common,
        )
        classes = (LlamaForCausalLM, LlamaForSequenceClassification)
    torch.manual_seed(seed)
    paths = []
    for name, cls, extra in (("policy", classes[0], {}), ("reward", classes[1], {"num_labels": 1})):
        for key, value in extra.items():
            setattr(config, key, value)
        model = cls(config)
        model.save_pretrained(workdir / name)
        tokenizer.save_pretrained(workdir / name)
        paths.append(workdir / name)
    rng = random.Random(seed)
    prompts = [" ".join(f"w{rng.randrange(vocab - 3)}" for _ in range(rng.randint(12, 20))) for _ in range(512)]
    return paths[0], paths[1], prompts


def rl_config(args, reward: Path, out: Path):
    from preflab.training.rl import RLTrainConfig

    config = RLTrainConfig(
        reward_model=str(reward),
        algorithm="rloo",
        beta=0.05,
        learning_rate=1e-5,
        n=args.n,
        max_steps=args.warmup + args.steps,
        per_device_train_batch_size=args.prompts * args.n,
        max_new_tokens=args.completion,
        max_length=args.completion + 64,
        logging_steps=10_000,
        save_steps=100_000,
        use_cpu=not args.gpu,
        eval_prompts=0,
    )
    trl_args = config.to_trl(str(out))
    trl_args.generation_kwargs = {"min_new_tokens": args.completion}  # the same work per step on both sides
    return config, trl_args


def run_trl(args, policy: Path, reward: Path, prompts: list[str], out: Path) -> dict:
    """preflab's path: RLOOTrainer with preflab's config and reward function; timed after the warm-up steps."""
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import RLOOTrainer

    from preflab.training.rl import RewardModelReward

    _config, trl_args = rl_config(args, reward, out)
    marks: dict[int, float] = {}

    class Clock(TrainerCallback):
        def on_step_end(self, a, state, control, **kwargs):
            marks[state.global_step] = time.perf_counter()

    trainer = RLOOTrainer(
        str(policy),
        reward_funcs=RewardModelReward(str(reward), str(trl_args.device)),
        args=trl_args,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=AutoTokenizer.from_pretrained(policy),
        callbacks=[Clock()],
    )
    trainer.remove_callback(PrinterCallback)  # its log dicts would interleave with the report
    trainer.train()
    seconds = marks[args.warmup + args.steps] - marks[args.warmup]
    return {
        "seconds": seconds,
        "steps_per_s": args.steps / seconds,
        "completion_tokens_per_s": args.steps * args.prompts * args.n * args.completion / seconds,
        "num_tokens": trainer.state.num_input_tokens_seen,
    }


def run_plain(args, policy_path: Path, reward_path: Path, prompts: list[str]) -> dict:
    """The notebook's way: REINFORCE with R = R_RM − β·KL, written out in PyTorch."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(policy_path)
    tokenizer.padding_side = "left"
    policy = AutoModelForCausalLM.from_pretrained(policy_path)
    reference = AutoModelForCausalLM.from_pretrained(policy_path).eval()
    scorer = AutoModelForSequenceClassification.from_pretrained(reward_path).eval()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-5)
    beta, n = 0.05, args.n
    generation = update = 0.0
    start = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            start, generation, update = time.perf_counter(), 0.0, 0.0
        batch = [p for p in prompts[step * args.prompts : (step + 1) * args.prompts] for _ in range(n)]
        enc = tokenizer(batch, return_tensors="pt", padding=True)
        t0 = time.perf_counter()
        policy.eval()
        with torch.no_grad():
            out = policy.generate(
                **enc,
                do_sample=True,
                max_new_tokens=args.completion,
                min_new_tokens=args.completion,
                pad_token_id=tokenizer.pad_token_id,
            )
        t1 = time.perf_counter()
        policy.train()
        width = enc["input_ids"].shape[1]
        mask = torch.cat([enc["attention_mask"], torch.ones_like(out[:, width:])], dim=1)
        targets = out[:, width:]

        def logps(model):
            logits = model(input_ids=out, attention_mask=mask).logits[:, width - 1 : -1].float()  # noqa: B023 (called within this iteration)
            return logits.log_softmax(-1).gather(-1, targets[..., None]).squeeze(-1).sum(-1)  # noqa: B023 (called within this iteration)

        mine = logps(policy)
        with torch.no_grad():
            theirs = logps(reference)
            eos = torch.full((out.shape[0], 1), tokenizer.eos_token_id)
            rewards = scorer(
                input_ids=torch.cat([out, eos], 1), attention_mask=torch.cat([mask, torch.ones_like(eos)], 1)
            ).logits[:, 0]
            shaped = (rewards - beta * (mine.detach() - theirs)).view(-1, n)
            advantages = (shaped - (shaped.sum(1, keepdim=True) - shaped) / (n - 1)).view(-1)
        loss = -(advantages * mine).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        generation += t1 - t0
        update += time.perf_counter() - t1
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "steps_per_s": args.steps / seconds,
        "completion_tokens_per_s": args.steps * args.prompts * n * args.completion / seconds,
        "generation_share": generation / seconds,
        "update_share": update / seconds,
    }


def run_gpu(args, workdir: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    policy, reward, prompts = build(workdir, gpu=True)
    tokenizer = AutoTokenizer.from_pretrained(policy)
    model = AutoModelForCausalLM.from_pretrained(policy, dtype=torch.bfloat16).cuda()
    enc = tokenizer([p for p in prompts[: args.prompts] for _ in range(args.n)], return_tensors="pt", padding=True).to(
        "cuda"
    )
    for _timed in (False, True):  # the first call warms up kernels
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.generate(
            **enc,
            do_sample=True,
            max_new_tokens=args.completion,
            min_new_tokens=args.completion,
            pad_token_id=tokenizer.pad_token_id,
        )
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
    generation = args.prompts * args.n * args.completion / seconds
    del model
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    result = run_trl(args, policy, reward, prompts, workdir / "trl")
    return {
        "generation_tokens_per_s": generation,
        "training_tokens_per_s": result["num_tokens"] / result["seconds"] * args.steps / (args.warmup + args.steps),
        "steps_per_s": result["steps_per_s"],
        "peak_gpu_memory_gb": torch.cuda.max_memory_allocated() / 2**30,
        "device": torch.cuda.get_device_name(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=8, help="Prompts per step.")
    parser.add_argument("--n", type=int, default=4, help="Completions per prompt.")
    parser.add_argument("--completion", type=int, default=32, help="Completion tokens.")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--gpu", action="store_true")
    args = parser.parse_args()

    import torch

    from preflab.training.runs import quiet_libraries

    with tempfile.TemporaryDirectory() as tmp, quiet_libraries(progress=False):
        workdir = Path(tmp)
        if args.gpu:
            if not torch.cuda.is_available():
                print("no CUDA GPU here: the GPU benchmark did not run")
                return
            print(json.dumps(run_gpu(args, workdir), indent=2))
            return
        torch.set_num_threads(args.threads)
        policy, reward, prompts = build(workdir, gpu=False)
        trl = run_trl(args, policy, reward, prompts, workdir / "trl")
        plain = run_plain(args, policy, reward, prompts)
    batch = f"{args.prompts} prompts × {args.n} completions × {args.completion} tokens"
    print(f"RL step throughput on the CPU ({args.threads} threads; {batch} per step; {args.steps} timed steps)")
    print(f"{'':<26} {'steps/s':>8} {'completion tok/s':>17}")
    for name, row in (("preflab (TRL RLOOTrainer)", trl), ("plain PyTorch REINFORCE", plain)):
        print(f"{name:<26} {row['steps_per_s']:>8.3f} {row['completion_tokens_per_s']:>17.1f}")
    print(
        f"ratio preflab / plain: {trl['steps_per_s'] / plain['steps_per_s']:.2f}; the plain loop spends "
        f"{plain['generation_share']:.0%} of its time generating"
    )
    print(json.dumps({"preflab": trl, "plain": plain}))


if __name__ == "__main__":
    main()
