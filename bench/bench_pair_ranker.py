"""The pair ranker against the Bradley–Terry reward model trained on the same comparisons.

Usage: python bench/bench_pair_ranker.py [--worlds toy digit-sum] [--seeds 0 1 2]

Two worlds with a known preference, both through preflab's store (rankings
imported, pairs built, one dataset version exported with 20% of prompts held out):

- toy: the digit world of `preflab demo toy` (`training/demos/toy.py`): a tiny LM
  trained on the base language samples candidates, the simulated annotator
  prefers those whose first digit is the prompt's last digit + 1. Starting model:
  that LM (hidden 64, 2 layers), with a fresh one-label head.
- digit-sum: the world of `bench/bench_reward_grouped.py`: 24 random digits a
  prompt, K = 4 candidates of 8 random digits, ranked by digit sum. Starting
  model: a random 4-layer Llama, hidden 128.

Per world and seed, both models start from the same weights and train with the
same optimizer settings, the same pairs per step and the same number of epochs:
`train reward` (TRL's pairwise RewardTrainer: r(chosen) − r(rejected)) and
`train pair-ranker` (one sequence with the prompt and both responses, read in both
orders: σ(s(c, r) − s(r, c))). Reported: each one's held-out pairwise accuracy,
the difference (ranker − reward model), and the training loop's wall and CPU time.
One torch thread (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from statistics import mean, stdev

from bench_reward_grouped import build_store, initial_model
from common import sqlite_dataset


def toy_store(workdir: Path, prompts: int, candidates: int, base_steps: int, seed: int):
    """The toy world's store and dataset version; returns (sessions, dataset name, pairs, base model path)."""
    from preflab.training.demos.toy import toy_rankings
    from preflab.training.demos.toy_config import ToySettings
    from preflab.training.demos.toy_world import train_base_model

    base = train_base_model(workdir / "base", steps=base_steps, batch_size=64, seed=seed)
    rankings = workdir / "rankings.jsonl"
    toy_rankings(base, ToySettings(prompts=prompts, candidates=candidates, seed=seed), rankings)
    sessions, version, pairs = sqlite_dataset(workdir, rankings, seed)
    return sessions, version.name, pairs, base


def cpu_clock():
    """A TrainerCallback timing the training loop in CPU seconds (steadier than wall time on a shared machine)."""
    from transformers import TrainerCallback

    class CpuClock(TrainerCallback):
        seconds = 0.0

        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.process_time()

        def on_train_end(self, args, state, control, **kwargs):
            self.seconds = time.process_time() - self.start

    return CpuClock()


def train_both(sessions, base: Path, dataset: str, workdir: Path, settings: dict) -> dict:
    from preflab.training.methods import METHODS, train

    out = {}
    for name, method in (("reward", "reward"), ("ranker", "pair-ranker")):
        clock = cpu_clock()
        config = METHODS[method].config(save_steps=1_000_000, logging_steps=10, use_cpu=True, **settings)
        result = train(method, sessions, config, str(base), dataset, output_dir=str(workdir / name), callbacks=[clock])
        out[name] = {
            "accuracy": result.metrics["heldout_accuracy"],
            "pairs": result.metrics["heldout_pairs"],
            "loop_s": result.metrics["train_runtime"],
            "cpu_s": clock.seconds,
            "steps": result.metrics["global_step"],
        }
    return out


def bench_world(world: str, seed: int, args) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"bench-ranker-{world}-") as tmp:
        workdir = Path(tmp)
        if world == "toy":
            sessions, dataset, pairs, base = toy_store(
                workdir, args.toy_prompts, args.toy_candidates, args.toy_base_steps, seed
            )
            settings = {
                "learning_rate": 1e-3,
                "num_train_epochs": args.epochs,
                "per_device_train_batch_size": 16,
                "warmup_steps": 0.1,
                "max_length": 16,
                "seed": seed,
            }
        else:
            sessions, dataset, pairs, _ = build_store(workdir, 4, args.sum_prompts, seed)
            base = initial_model(workdir / "init", seed)
            # bench_reward_grouped's settings: 8 prompts' pairs (8·C(4, 2)) per step.
            settings = {
                "learning_rate": 1e-3,
                "num_train_epochs": args.epochs,
                "per_device_train_batch_size": 48,
                "warmup_steps": 0.05,
                "max_length": 64,
                "seed": seed,
            }
        return {"pairs": pairs, **train_both(sessions, base, dataset, workdir, settings)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", nargs="+", default=["toy", "digit-sum"], choices=["toy", "digit-sum"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=float, default=3.0, help="Passes over the training pairs (both models).")
    parser.add_argument("--toy-prompts", type=int, default=600)
    parser.add_argument("--toy-candidates", type=int, default=4)
    parser.add_argument("--toy-base-steps", type=int, default=150, help="Training steps of the toy world's LM.")
    parser.add_argument("--sum-prompts", type=int, default=400)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads.")
    args = parser.parse_args()

    import os

    import torch

    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), CPU; load average "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    report = {}
    for world in args.worlds:
        runs = [bench_world(world, seed, args) for seed in args.seeds]
        report[world] = runs
        print(
            f"\n## {world}: {args.epochs:g} epochs, ≈{runs[0]['pairs']:,} pairs "
            f"({runs[0]['reward']['pairs']:,} held out)"
        )
        print(f"{'seed':>4}  {'':22}{'held-out acc':>13}{'loop wall':>11}{'loop CPU':>10}{'steps':>7}")
        for seed, r in zip(args.seeds, runs):
            for name, label in (("reward", "Bradley–Terry reward"), ("ranker", "pair ranker")):
                row = r[name]
                print(
                    f"{seed:>4}  {label:22}{row['accuracy']:>13.3f}{row['loop_s']:>10.1f}s{row['cpu_s']:>9.1f}s"
                    f"{row['steps']:>7}"
                )
        diffs = [r["ranker"]["accuracy"] - r["reward"]["accuracy"] for r in runs]
        spread = f" ± {stdev(diffs):.3f} (sd over seeds)" if len(diffs) > 1 else ""
        reward, ranker = (mean(r[m]["accuracy"] for r in runs) for m in ("reward", "ranker"))
        cost = mean(r["ranker"]["cpu_s"] / r["reward"]["cpu_s"] for r in runs)
        print(
            f"held-out accuracy: reward model {reward:.3f}, pair ranker {ranker:.3f}; difference (ranker − reward) "
            f"{mean(diffs):+.3f}{spread}; per seed {', '.join(f'{d:+.3f}' for d in diffs)}; "
            f"ranker's training CPU {cost:.2f}× the reward model's"
        )
    print(f"\nload average at the end {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(json.dumps({"epochs": args.epochs, "seeds": args.seeds, "worlds": report}))


if __name__ == "__main__":
    main()
