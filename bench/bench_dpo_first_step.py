"""DPO with --max-steps: time to the first training step, reference log-probabilities for the whole split or not.

Usage: python bench/bench_dpo_first_step.py [--pairs 360] [--steps 10] [--batch 8] [--threads 1]
       python bench/bench_dpo_first_step.py --model smollm2-135m-instruct   # the embedded model (heavy on a CPU)

TRL's DPOTrainer computes the reference log-probabilities of every row it is given
before its first step (`precompute_ref_log_probs`, on in `preflab train dpo`). A
10-step run on the embedded model spent 4 of its 10 minutes on all 45 batches of
the split. Two settings, each in its own process on its own copy of the data (no
dataset cache shared):

- whole split: the trainer is given every training row, as `train dpo` did;
- rows reached: it is given the `--steps × --batch` rows it will train on
  (`preflab.training.dpo.rows_reached`), as `train dpo` does now.

Measured: seconds from building the trainer (tokenizing and precomputing included)
to the end of the first optimizer step, and the rows whose reference
log-probabilities were computed. Model: a random 4-layer Llama (hidden 256, a
4,000-word vocabulary) unless `--model` names another (any `--model` preflab takes).
Data: random words, prompts of 10–30, responses of 10–30: every row fits --max-length 256
with SmolLM2's tokenizer, as in the issue's run (TRL drops a row whose prompt fills it).
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

from bench_dpo_gpu import word_tokenizer

VOCAB = 4000


def build(workdir: Path, model: str | None, pairs: int, seed: int) -> str:
    """Save the model (unless one is named) and the data, twice; returns the model's location."""
    import datasets
    import torch
    from datasets import Dataset
    from transformers.utils import logging as hf_logging

    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()
    if model is None:
        from transformers import LlamaConfig, LlamaForCausalLM

        tokenizer = word_tokenizer(VOCAB)
        torch.manual_seed(seed)
        config = LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=256,
            intermediate_size=768,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=1024,
            tie_word_embeddings=True,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            bos_token_id=None,
        )
        LlamaForCausalLM(config).save_pretrained(workdir / "model")
        tokenizer.save_pretrained(workdir / "model")
        model = str(workdir / "model")
    else:
        from preflab.lm.loading import resolve_model_path

        model = str(resolve_model_path(model))  # converts the embedded model once, before any timing
    rng = random.Random(seed)

    def words(low, high):
        return " ".join(f"w{rng.randrange(VOCAB - 3)}" for _ in range(rng.randint(low, high)))

    rows = [
        {"prompt": words(10, 30), "chosen": " " + words(10, 30), "rejected": " " + words(10, 30)} for _ in range(pairs)
    ]
    for mode in ("whole-split", "rows-reached"):
        Dataset.from_list(rows).save_to_disk(str(workdir / f"data-{mode}"))
    return model


def run_mode(mode: str, workdir: Path, model: str, steps: int, batch: int, threads: int) -> dict:
    """One setting, in this process: build the trainer, stop after its first step."""
    import torch
    from datasets import load_from_disk
    from transformers import TrainerCallback
    from trl import DPOTrainer

    from preflab.lm.loading import load_tokenizer_for_training
    from preflab.training.config import DPOTrainConfig
    from preflab.training.dpo import rows_reached

    torch.set_num_threads(threads)
    config = DPOTrainConfig(max_steps=steps, per_device_train_batch_size=batch, max_length=256, save_steps=10**9)
    args = config.to_trl(str(workdir / f"out-{mode}"))
    args.save_strategy = "no"
    split = load_from_disk(str(workdir / f"data-{mode}"))
    tokenizer = load_tokenizer_for_training(model)
    start = time.perf_counter()  # choosing the rows (tokenizing their prompts) counts against the fast path
    given = split if mode == "whole-split" else rows_reached(split, config, args.world_size, tokenizer)
    marks = {}

    class FirstStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            marks["first_step"] = time.perf_counter()
            control.should_training_stop = True

    trainer = DPOTrainer(model, args=args, train_dataset=given, processing_class=tokenizer, callbacks=[FirstStep()])
    built = time.perf_counter()
    trainer.train()
    return {
        "mode": mode,
        "rows": len(split),
        "reference_rows": len(trainer.train_dataset),
        "build_s": built - start,
        "first_step_s": marks["first_step"] - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=360, help="Training pairs (360 = 45 batches of 8).")
    parser.add_argument("--steps", type=int, default=10, help="--max-steps of the run.")
    parser.add_argument("--batch", type=int, default=8, help="Pairs per step.")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared machine).")
    parser.add_argument("--model", help="A model preflab can load (default: a random 4-layer Llama).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--location", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:  # a child process: one setting
        result = run_mode(args.mode, Path(args.workdir), args.location, args.steps, args.batch, args.threads)
        print("RESULT " + json.dumps(result))
        return
    with tempfile.TemporaryDirectory(prefix="bench-dpo-first-step-") as tmp:
        workdir = Path(tmp)
        location = build(workdir, args.model, args.pairs, args.seed)
        results = {}
        for mode in ("whole-split", "rows-reached"):
            child = [
                sys.executable,
                __file__,
                "--mode",
                mode,
                "--workdir",
                str(workdir),
                "--location",
                location,
                "--steps",
                str(args.steps),
                "--batch",
                str(args.batch),
                "--threads",
                str(args.threads),
            ]
            done = subprocess.run(child, capture_output=True, text=True)
            lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            if done.returncode != 0 or not lines:
                sys.exit(f"the {mode} run failed:\n{done.stderr[-4000:]}")
            results[mode] = json.loads(lines[-1][len("RESULT ") :])
    print(
        f"model: {args.model or 'random 4-layer Llama, hidden 256'}; {args.pairs} pairs, --max-steps {args.steps}, "
        f"batch {args.batch}, {args.threads} torch thread(s)"
    )
    for mode, r in results.items():
        print(
            f"{mode:13} reference log-probs for {r['reference_rows']:>5,} rows; trainer built in "
            f"{r['build_s']:6.1f} s; first step done at {r['first_step_s']:6.1f} s"
        )
    before, after = results["whole-split"]["first_step_s"], results["rows-reached"]["first_step_s"]
    print(f"time to the first step: {before:.1f} s before, {after:.1f} s after: {before / after:.1f}× sooner")
    print(json.dumps({"model": args.model, "pairs": args.pairs, "steps": args.steps, "results": results}))


if __name__ == "__main__":
    main()
