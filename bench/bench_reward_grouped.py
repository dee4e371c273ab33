"""Grouped reward-model training against TRL's pairwise RewardTrainer: same data, same epochs.

Usage: python bench/bench_reward_grouped.py [--k 4 8] [--prompts 400 200] [--epochs 2] [--seeds 0 1 2]

Data (built through preflab's store: rankings imported, pairs built, a dataset
version exported): each prompt is 24 random digits; its K candidates are 8
random digits each; the annotator ranks them strictly by digit sum (equal sums
tie), so a prompt yields up to C(K, 2) pairs. Model: a randomly initialised
4-layer Llama (hidden 128), the same initial weights for both trainers.

Both runs go through `preflab.training.methods.train` (a recorded run
each) and see the same pairs per optimizer step: TRL's trainer gets batches of
P·C(K, 2) pairs, the grouped trainer batches of P prompts. Reported: the
training loop's own runtime (Trainer's train_runtime), the whole run's wall time
(data copy, model loading, held-out evaluation included), the loop's CPU time
(steadier than wall time where other jobs share the cores), forward sequences
per epoch, and the held-out pairwise accuracy. One torch thread by default: on a
shared 2-core machine two threads oversubscribe the cores and the timings swing
several-fold from run to run.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from math import comb
from pathlib import Path
from statistics import mean

from common import sqlite_dataset


def build_store(workdir: Path, k: int, prompts: int, seed: int):
    """A database holding the rankings, pairs and an exported dataset version.

    Returns (sessions, dataset name, pairs, training pairs).
    """
    from preflab.db.pairs.build import tiers_from_scores

    rng = random.Random(seed)
    path = workdir / "rankings.jsonl"
    with path.open("w") as handle:
        for i in range(prompts):
            prompt = " ".join(str(rng.randrange(10)) for _ in range(24)) + " ="
            responses: dict[str, int] = {}
            while len(responses) < k:
                digits = [rng.randrange(10) for _ in range(8)]
                responses[" ".join(map(str, digits))] = sum(digits)
            texts = list(responses)
            tiers = tiers_from_scores({j: float(responses[t]) for j, t in enumerate(texts)})
            handle.write(
                json.dumps(
                    {
                        "prompt": prompt,
                        "responses": texts,
                        "ranking": tiers,
                        "annotator": "digit-sum",
                        "id": f"bench-{i}",
                    }
                )
                + "\n"
            )
    sessions, version, pairs = sqlite_dataset(workdir, path, seed)
    return sessions, version.name, pairs, version.n_train


def initial_model(path: Path, seed: int) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from preflab.training.demos.toy_world import digit_tokenizer

    tokenizer = digit_tokenizer()
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def train_once(
    sessions,
    base: Path,
    dataset: str,
    workdir: Path,
    grouped: bool,
    k: int,
    prompts_per_step: int,
    epochs: float,
    seed: int,
) -> dict:
    from transformers import TrainerCallback

    from preflab.training.config import RewardTrainConfig
    from preflab.training.methods import train

    class CpuClock(TrainerCallback):
        """CPU seconds of the training loop: steadier than wall time on a machine others share."""

        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.process_time()

        def on_train_end(self, args, state, control, **kwargs):
            self.seconds = time.process_time() - self.start

    clock = CpuClock()
    batch = prompts_per_step if grouped else prompts_per_step * comb(k, 2)
    config = RewardTrainConfig(
        grouped=grouped,
        num_train_epochs=epochs,
        per_device_train_batch_size=batch,
        per_device_eval_batch_size=64,
        learning_rate=1e-3,
        warmup_steps=0.05,
        max_length=64,
        logging_steps=10,
        save_steps=1_000_000,
        seed=seed,
        use_cpu=True,
    )
    start = time.perf_counter()
    output_dir = workdir / ("grouped" if grouped else "pairwise")
    result = train("reward", sessions, config, str(base), dataset, output_dir=str(output_dir), callbacks=[clock])
    return {
        "wall_s": time.perf_counter() - start,
        "train_s": result.metrics["train_runtime"],
        "cpu_s": clock.seconds,
        "steps": result.metrics["global_step"],
        "accuracy": result.metrics["heldout_accuracy"],
        "loss": result.metrics["last_loss"],
    }


def bench(k: int, prompts: int, epochs: float, prompts_per_step: int, seed: int) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"bench-grouped-k{k}-") as tmp:
        workdir = Path(tmp)
        sessions, dataset, pairs, n_train = build_store(workdir, k, prompts, seed)
        base = initial_model(workdir / "init", seed)
        train_prompts = round(prompts * 0.8)
        out = {"k": k, "pairs": pairs, "train_pairs": n_train}
        # Pairwise first, then grouped: a warm page cache favours neither much, but the order is fixed.
        out["pairwise"] = train_once(sessions, base, dataset, workdir, False, k, prompts_per_step, epochs, seed)
        out["grouped"] = train_once(sessions, base, dataset, workdir, True, k, prompts_per_step, epochs, seed)
        out["pairwise"]["sequences_per_epoch"] = 2 * n_train
        out["grouped"]["sequences_per_epoch"] = train_prompts * k
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="+", default=[4, 8], help="Candidates per prompt.")
    parser.add_argument(
        "--prompts",
        type=int,
        nargs="+",
        default=[400, 200],
        help="Prompts for each K (80%% train, 20%% held out); K = 8 has 28 pairs a prompt.",
    )
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--prompts-per-step", type=int, default=8, help="Prompts whose pairs make one step.")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads.")
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0],
        help="One fresh data set and initial model per seed; several give a mean.",
    )
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), CPU")
    prompts = dict(zip(args.k, args.prompts + args.prompts[-1:] * len(args.k)))
    report = {}
    for k in args.k:
        runs = [bench(k, prompts[k], args.epochs, args.prompts_per_step, seed) for seed in args.seeds]
        report[f"k={k}"] = runs
        print(
            f"\n## K = {k}: {prompts[k]} prompts (≈{runs[0]['pairs']:,} pairs), {args.epochs:g} epochs, "
            f"{args.prompts_per_step} prompts' pairs per step"
        )
        print(
            f"{'seed':>4}  {'':16}{'loop wall':>10}{'loop CPU':>10}{'whole run':>11}{'steps':>7}"
            f"{'seq/epoch':>11}{'held-out acc':>14}"
        )
        for seed, r in zip(args.seeds, runs):
            for name, row in (("TRL pairwise", r["pairwise"]), ("preflab grouped", r["grouped"])):
                print(
                    f"{seed:>4}  {name:16}{row['train_s']:>9.1f}s{row['cpu_s']:>9.1f}s{row['wall_s']:>10.1f}s"
                    f"{row['steps']:>7}{row['sequences_per_epoch']:>11,}{row['accuracy']:>14.3f}"
                )
        ratio = {key: [r["pairwise"][key] / r["grouped"][key] for r in runs] for key in ("train_s", "cpu_s", "wall_s")}
        acc = {m: [r[m]["accuracy"] for r in runs] for m in ("pairwise", "grouped")}
        print(
            f"speed-up (mean over {len(runs)} seed(s), min in brackets): training loop {mean(ratio['train_s']):.2f}× "
            f"wall ({min(ratio['train_s']):.2f}×), {mean(ratio['cpu_s']):.2f}× CPU ({min(ratio['cpu_s']):.2f}×); "
            f"whole run {mean(ratio['wall_s']):.2f}× wall"
        )
        print(
            f"held-out accuracy: pairwise {mean(acc['pairwise']):.3f}, grouped {mean(acc['grouped']):.3f} "
            f"(difference {mean(acc['grouped']) - mean(acc['pairwise']):+.3f})"
        )
    print(json.dumps({"epochs": args.epochs, "seeds": args.seeds, "runs": report}))


if __name__ == "__main__":
    main()
