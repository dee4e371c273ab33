"""DPO throughput on a GPU: TRL's default settings against the settings `preflab train dpo` uses.

Usage: python bench/bench_dpo_gpu.py [--pairs 512] [--steps 40] [--batch 8] [--peak-tflops auto]
                                     [--size 0.5b|1.5b|3b|7b|auto]
       python bench/bench_dpo_gpu.py --smoke     # a tiny model for a few steps on any device: checks the script
       python bench/bench_dpo_gpu.py --dry-run   # without CUDA: the settings each side would use, no step

Needs a CUDA GPU (it says so and exits 0 without one, so `make bench` passes on CPU
machines). Model: a randomly initialised Qwen2.5-shaped decoder, by default 0.5B's
shape (24 layers, hidden 896, vocab 151,936; ~0.49 B parameters); `--size` takes 1.5B's,
3B's or 7B's, and `auto` the largest whose training state fits the GPU's memory (16 bytes
a parameter for weights, gradients and Adam's moments, half as much again for activations, and
4 more for the TRL defaults' reference copy). Random weights are fine for throughput.
Data: random word sequences, prompts 192–320 tokens, completions
64–256 tokens, built in-process with a WordLevel tokenizer (no hub).

Each setting runs in its own process (clean peak-memory numbers) on the same data:

- TRL defaults: `DPOConfig()` as shipped (bf16 autocast, gradient checkpointing on,
  a reference forward pass on every step, no padding multiple);
- preflab: `DPOTrainConfig().to_trl()` (bf16 autocast, no gradient checkpointing,
  reference log-probabilities precomputed in one pass before training).

Reported: training-loop tokens/s (TRL's own `num_tokens` over `train_runtime`),
end-to-end tokens/s (construction with the precompute pass included), model FLOPs
utilisation and peak GPU memory. Useful FLOPs per token follow PaLM's accounting:
policy 6N + 12·L·d·T (forward and backward), reference 2N + 4·L·d·T (forward), with N the
parameters outside the input embedding and T the sequence length; MFU counts
both, whichever way the reference pass is scheduled.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEAK_BF16_TFLOPS = {
    "H100 PCIe": 756.0,
    "H100 NVL": 835.0,
    "H100": 989.4,
    "H200": 989.4,
    "A100": 312.0,
    "L40S": 362.0,
    "A10G": 125.0,
}


def peak_tflops(name: str) -> float | None:
    for key, value in PEAK_BF16_TFLOPS.items():  # longest names first in the table where they overlap
        if key in name:
            return value
    return None


# Qwen2.5's shapes (their config.json), and a tiny one that checks the script anywhere.
QWEN = {"vocab_size": 151_936}
SHAPES = {
    "smoke": {
        "vocab_size": 512,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    },
    "0.5b": {
        **QWEN,
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
    },
    "1.5b": {
        **QWEN,
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
    },
    "3b": {
        **QWEN,
        "hidden_size": 2048,
        "intermediate_size": 11008,
        "num_hidden_layers": 36,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
    },
    "7b": {
        **QWEN,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "tie_word_embeddings": False,
    },
}
PARAMS_B = {"0.5b": 0.49, "1.5b": 1.54, "3b": 3.09, "7b": 7.62}  # billions, as published
BYTES_PER_PARAM = 16 * 1.5 + 4  # fp32 weights, gradients and Adam's two moments, activations, the reference copy


def largest_fitting(memory_bytes: float) -> str:
    """The largest shape whose DPO training state fits `memory_bytes` of GPU memory ("0.5b" if none does)."""
    fitting = [size for size, billions in PARAMS_B.items() if billions * 1e9 * BYTES_PER_PARAM <= memory_bytes]
    return fitting[-1] if fitting else "0.5b"


def word_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    vocab.update({f"w{i}": i + 3 for i in range(vocab_size - 3)})
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def build(workdir: Path, size: str, pairs: int, seed: int) -> dict:
    """Save the model of shape `size` and its tokenizer, write the dataset; returns what the runs need to know."""
    import torch
    from datasets import Dataset
    from transformers import Qwen2Config, Qwen2ForCausalLM

    smoke = size == "smoke"
    shape = {"tie_word_embeddings": True, **SHAPES[size]}
    tokenizer = word_tokenizer(shape["vocab_size"])
    torch.manual_seed(seed)
    config = Qwen2Config(
        **shape,
        max_position_embeddings=2048,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(workdir / "model")
    # Apart from the model: AutoTokenizer would rebuild it as a BPE from a qwen2 config beside it.
    tokenizer.save_pretrained(workdir / "tokenizer")
    rng = random.Random(seed)
    lengths = ((12, 20), (4, 16)) if smoke else ((192, 320), (64, 256))

    def words(low, high):
        return " ".join(f"w{rng.randrange(shape['vocab_size'] - 3)}" for _ in range(rng.randint(low, high)))

    rows = [
        {"prompt": words(*lengths[0]), "chosen": " " + words(*lengths[1]), "rejected": " " + words(*lengths[1])}
        for _ in range(pairs)
    ]
    Dataset.from_list(rows).save_to_disk(str(workdir / "data"))
    embedding = model.get_input_embeddings().weight.numel()
    return {
        "size": size,
        "params": sum(p.numel() for p in model.parameters()),
        "matmul_params": sum(p.numel() for p in model.parameters())
        - embedding
        + (embedding if config.tie_word_embeddings else 0),
        "layers": config.num_hidden_layers,
        "hidden": config.hidden_size,
    }


def trainer_args(mode: str, workdir: Path, steps: int, batch: int, cuda: bool):
    """The TRL arguments of one setting: TRL's defaults, or what `preflab train dpo` passes."""
    from trl import DPOConfig

    from preflab.lm.loading import prefer_reusable_attention
    from preflab.training.config import DPOTrainConfig

    device_overrides = {} if cuda else {"use_cpu": True, "bf16": False}
    common = {
        "output_dir": str(workdir / f"out-{mode}"),
        "per_device_train_batch_size": batch,
        "max_steps": steps,
        "save_strategy": "no",
        "report_to": [],
        "logging_steps": max(1, steps // 4),
        "disable_tqdm": True,
        "learning_rate": 1e-6,
    }
    if mode == "trl-default":
        args = DPOConfig(**common, **device_overrides)
    else:
        config = DPOTrainConfig(
            per_device_train_batch_size=batch,
            max_steps=steps,
            learning_rate=1e-6,
            logging_steps=max(1, steps // 4),
            save_steps=10**9,
            use_cpu=None if cuda else True,
        )
        args = config.to_trl(common["output_dir"])
        args.save_strategy = "no"
        prefer_reusable_attention()  # as `preflab train` does before it builds a trainer
    return args


def settings_of(args) -> dict:
    return {
        "bf16": bool(args.bf16),
        "gradient_checkpointing": bool(args.gradient_checkpointing),
        "precompute": bool(args.precompute_ref_log_probs),
    }


def run_mode(mode: str, workdir: Path, steps: int, batch: int, smoke: bool) -> dict:
    """One setting, in this process: construct the trainer (precompute included), train, measure."""
    import torch
    from datasets import load_from_disk
    from transformers import AutoTokenizer
    from trl import DPOTrainer

    cuda = torch.cuda.is_available()
    args = trainer_args(mode, workdir, steps, batch, cuda)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    tokenizer = AutoTokenizer.from_pretrained(workdir / "tokenizer")
    start = time.perf_counter()
    trainer = DPOTrainer(
        str(workdir / "model"),
        args=args,
        train_dataset=load_from_disk(str(workdir / "data")),
        processing_class=tokenizer,
    )
    built = time.perf_counter() - start
    output = trainer.train()
    total = time.perf_counter() - start
    tokens = max(entry.get("num_tokens", 0) for entry in trainer.state.log_history)
    pairs = steps * batch * trainer.args.world_size
    return {
        "mode": mode,
        "construct_s": built,
        "train_s": output.metrics["train_runtime"],
        "total_s": total,
        "tokens": tokens,
        "pairs": pairs,
        **settings_of(trainer.args),
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
    }


def flops(info: dict, result: dict) -> float:
    """Useful model FLOPs of the run: policy forward+backward and reference forward over its tokens."""
    tokens = result["tokens"]
    mean_len = tokens / (2 * result["pairs"])  # each pair is two sequences (prompt+chosen, prompt+rejected)
    attention = info["layers"] * info["hidden"] * mean_len
    return tokens * ((6 * info["matmul_params"] + 12 * attention) + (2 * info["matmul_params"] + 4 * attention))


def dry_run(args) -> None:
    """What a run would train, on the smoke model and data, with no step taken: the script's checks without a GPU."""
    with tempfile.TemporaryDirectory(prefix="bench-dpo-") as tmp:
        workdir = Path(tmp)
        info = build(workdir, "smoke", min(args.pairs, 32), args.seed)
        settings = {
            mode: settings_of(trainer_args(mode, workdir, min(args.steps, 4), min(args.batch, 4), cuda=False))
            for mode in ("trl-default", "preflab")
        }
    for mode, chosen in settings.items():
        print(f"{mode:14}" + " ".join(f"{k}={v}" for k, v in chosen.items()))
    print("dry run: no CUDA GPU here, so no step was taken and nothing was measured")
    print(json.dumps({"dry_run": True, "measured": False, "device": "cpu", **info, "settings": settings}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=512, help="Preference pairs in the dataset.")
    parser.add_argument("--steps", type=int, default=40, help="Optimizer steps per setting.")
    parser.add_argument("--batch", type=int, default=8, help="Pairs per device per step.")
    parser.add_argument("--peak-tflops", type=float, help="The GPU's dense bf16 peak (default: from its name).")
    parser.add_argument("--smoke", action="store_true", help="Tiny model, few steps, any device (checks the script).")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="Without CUDA: the smoke model and data, and the settings each side would train with; no step is "
        "taken and nothing is measured (with CUDA: as --smoke).",
    )
    parser.add_argument(
        "--size",
        choices=("0.5b", "1.5b", "3b", "7b", "auto"),
        default="0.5b",
        help="The model's shape (Qwen2.5's); auto: the largest whose training fits the GPU.",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()

    import torch

    if args.mode:  # a child process: one setting
        result = run_mode(args.mode, Path(args.workdir), args.steps, args.batch, args.smoke)
        print("RESULT " + json.dumps(result))
        return
    if args.dry_run and not torch.cuda.is_available():
        dry_run(args)
        return
    args.smoke = args.smoke or args.dry_run
    if not torch.cuda.is_available() and not args.smoke:
        print(
            "bench_dpo_gpu.py measures DPO on a CUDA GPU and none is available here "
            "(torch.cuda.is_available() is False): nothing measured. Run it on a GPU machine, "
            "or pass --smoke to check the script on this device."
        )
        return
    if args.smoke:
        args.pairs, args.steps, args.batch = min(args.pairs, 32), min(args.steps, 4), min(args.batch, 4)
        size = "smoke"
    else:
        size = largest_fitting(torch.cuda.mem_get_info()[1]) if args.size == "auto" else args.size
    with tempfile.TemporaryDirectory(prefix="bench-dpo-") as tmp:
        workdir = Path(tmp)
        info = build(workdir, size, args.pairs, args.seed)
        results = {}
        for mode in ("trl-default", "preflab"):
            child = [
                sys.executable,
                __file__,
                "--mode",
                mode,
                "--workdir",
                str(workdir),
                "--steps",
                str(args.steps),
                "--batch",
                str(args.batch),
            ] + (["--smoke"] if args.smoke else [])
            done = subprocess.run(child, capture_output=True, text=True)
            lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            if done.returncode != 0 or not lines:
                sys.exit(f"the {mode} run failed:\n{done.stderr[-4000:]}")
            results[mode] = json.loads(lines[-1][len("RESULT ") :])
    device = results["preflab"]["device"]
    peak = args.peak_tflops or peak_tflops(device)
    print(f"device: {device}; model: {size}, {info['params']:,} parameters; {args.steps} steps × {args.batch} pairs")
    print(f"{'':14}{'loop tok/s':>12}{'e2e tok/s':>11}{'loop s':>8}{'total s':>9}{'MFU':>8}{'peak GiB':>10}  settings")
    measured = {}
    for mode, r in results.items():
        loop, e2e = r["tokens"] / r["train_s"], r["tokens"] / r["total_s"]
        utilisation = flops(info, r) / r["total_s"] / (peak * 1e12) if peak else None
        measured[mode] = {
            "loop_tokens_per_s": round(loop, 1),
            "e2e_tokens_per_s": round(e2e, 1),
            "mfu": None if utilisation is None else round(utilisation, 4),
            "peak_memory_gib": r["peak_memory_gib"],
        }
        mfu = f"{utilisation:.1%}" if peak else "n/a"
        memory = f"{r['peak_memory_gib']:.1f}" if r["peak_memory_gib"] is not None else "n/a"
        settings = f"bf16={r['bf16']} grad-ckpt={r['gradient_checkpointing']} precompute={r['precompute']}"
        print(
            f"{mode:14}{loop:>12,.0f}{e2e:>11,.0f}{r['train_s']:>8.1f}{r['total_s']:>9.1f}{mfu:>8}{memory:>10}  "
            f"{settings}"
        )
    d, p = results["trl-default"], results["preflab"]
    print(
        f"preflab / TRL defaults: end-to-end throughput {d['total_s'] / p['total_s']:.2f}×, "
        f"training loop {(p['tokens'] / p['train_s']) / (d['tokens'] / d['train_s']):.2f}×"
    )
    if not peak:
        print("MFU needs the GPU's peak: pass --peak-tflops")
    summary = {"dry_run": False, "measured": True, "device": device, "size": size, "params": info["params"]}
    print(json.dumps({**summary, "steps": args.steps, "batch": args.batch, "settings": measured}))


if __name__ == "__main__":
    main()
