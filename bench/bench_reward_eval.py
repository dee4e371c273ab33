"""The reward-model bench (`preflab train eval` on a reward model) on 100k held-out pairs with a tiny model.

Usage: python bench/bench_reward_eval.py [--pairs 100000] [--replies 4] [--rounds 1000]
                                          [--baseline-pairs 5000] [--only preflab,rewardbench]

The pairs are the k·(k−1)/2 pairs of rankings of `--replies` replies (4: six pairs a
prompt, 16,667 prompts), chat messages as a conversational export holds them, each
prompt a user turn of about 20 words and each reply about 30, with a category, an
annotator kind and a margin. The model is the tests' tiny Llama reward model, built by
bench/worlds.py (2 layers, hidden 32, ChatML template), on the CPU with one torch thread per case.

Each case runs in a fresh process, so its peak RSS is its own:
- preflab: `score.score_split` (loading the model, warm; every distinct reply of a side
  scored once, batches sorted by length) then `bench.bench` (accuracy, breakdowns, length, position) with `--rounds`
  bootstrap rounds over prompts, timed apart;
- rewardbench: the baseline, RewardBench 0.1.4's path as written out in
  tests/training/reward_eval/test_reward_bench.py: the chat template renders each
  side's text, transformers' text-classification pipeline scores chosen and rejected
  batch by batch (batch size 64, padded), `chosen > rejected`; on `--baseline-pairs`
  pairs and scaled to `--pairs` (it scores each pair's two texts, so its time is
  linear in pairs).
Prints one line per case, the ratio, and a JSON document of all of them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import peak_rss_mb

WORDS = [
    "the",
    "a",
    "model",
    "answer",
    "question",
    "reply",
    "number",
    "value",
    "because",
    "which",
    "there",
    "about",
    "would",
    "could",
    "water",
    "light",
    "river",
    "city",
    "music",
    "paper",
    "colour",
    "window",
    "garden",
    "little",
    "great",
    "simple",
]
CATEGORIES = ("chat", "math", "code", "safety", "reasoning")


def held_out(n_pairs: int, replies: int, seed: int = 0):
    """(a conversational split of about `n_pairs` pairs, the pairs' facts)."""
    from itertools import combinations

    import numpy as np
    from datasets import Dataset

    from preflab.training.reward_eval.pairs import PairFacts

    rng = np.random.default_rng(seed)
    per_prompt = replies * (replies - 1) // 2
    prompts = -(-n_pairs // per_prompt)
    rows = {"prompt": [], "chosen": [], "rejected": []}
    ids, categories, kinds, margins = [], [], [], []

    def text(n):
        return " ".join(rng.choice(WORDS, n))

    for p in range(prompts):
        prompt = [{"role": "user", "content": text(20) + "?"}]
        answers = [[{"role": "assistant", "content": text(int(rng.integers(15, 45)))}] for _ in range(replies)]
        category, kind = CATEGORIES[p % len(CATEGORIES)], ("human", "ai")[p % 3 == 0]
        for better, worse in combinations(range(replies), 2):  # the ranking is the reply order
            rows["prompt"].append(prompt)
            rows["chosen"].append(answers[better])
            rows["rejected"].append(answers[worse])
            ids.append(p)
            categories.append(category)
            kinds.append(kind)
            margins.append(float(worse - better))
    n = min(n_pairs, len(ids))
    split = Dataset.from_dict({k: v[:n] for k, v in rows.items()})
    facts = PairFacts(
        np.array(ids[:n]),
        np.array(categories[:n], dtype=object),
        np.array(kinds[:n], dtype=object),
        np.array(margins[:n]),
    )
    return split, facts


def tiny_model(workdir: Path) -> str:
    from worlds import tiny_reward_model

    path = workdir / "tiny-rm"
    if not path.exists():
        tiny_reward_model(path, seed=0)
    return str(path)


def case_preflab(args) -> dict:
    import torch

    from preflab.lm.loading import load_sequence_scorer
    from preflab.training.reward_eval.bench import bench
    from preflab.training.reward_eval.score import score_split

    torch.set_num_threads(1)
    split, facts = held_out(args.pairs, args.replies)
    path = tiny_model(Path(args.workdir))
    load_sequence_scorer(path)  # imports and the file cache warmed, as the baseline's are before its clock starts
    start = time.perf_counter()
    scored, read = score_split("tiny", "reward", path, split, batch_size=64)
    scoring = time.perf_counter() - start
    start = time.perf_counter()
    report = bench(scored, facts, read, rounds=args.rounds, seed=0)
    stats = time.perf_counter() - start
    return {
        "case": "preflab",
        "pairs": len(split),
        "prompts": report["prompts"],
        "distinct_replies": args.replies * report["prompts"],
        "scoring_s": round(scoring, 2),
        "bench_s": round(stats, 2),
        "total_s": round(scoring + stats, 2),
        "rounds": args.rounds,
        "accuracy": report["accuracy"],
        "low": report["low"],
        "high": report["high"],
        "peak_rss_mb": round(peak_rss_mb()),
    }


def case_rewardbench(args) -> dict:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    torch.set_num_threads(1)
    split, _ = held_out(args.baseline_pairs, args.replies)
    path = tiny_model(Path(args.workdir))
    tokenizer = AutoTokenizer.from_pretrained(path)
    reward_pipe = pipeline(
        "text-classification",
        model=AutoModelForSequenceClassification.from_pretrained(path),
        tokenizer=tokenizer,
        device="cpu",
    )
    kwargs = {"batch_size": 64, "truncation": True, "max_length": 2048, "function_to_apply": "none"}
    start = time.perf_counter()
    texts = {
        side: [
            tokenizer.apply_chat_template(list(p) + list(r), tokenize=False)
            for p, r in zip(split["prompt"], split[side])
        ]
        for side in ("chosen", "rejected")
    }
    right = 0
    for begin in range(0, len(split), 64):
        chosen = reward_pipe(texts["chosen"][begin : begin + 64], **kwargs)
        rejected = reward_pipe(texts["rejected"][begin : begin + 64], **kwargs)
        right += sum(c["score"] > r["score"] for c, r in zip(chosen, rejected))
    seconds = time.perf_counter() - start
    return {
        "case": "rewardbench",
        "pairs": len(split),
        "seconds": round(seconds, 2),
        "scaled_s": round(seconds * args.pairs / len(split), 1),
        "accuracy": right / len(split),
        "peak_rss_mb": round(peak_rss_mb()),
    }


CASES = {"preflab": case_preflab, "rewardbench": case_rewardbench}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--replies", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--baseline-pairs", type=int, default=5000)
    parser.add_argument("--only", default=",".join(CASES))
    parser.add_argument("--workdir", default="/tmp/bench-reward-eval")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    if args.case:
        print(json.dumps(CASES[args.case](args)))
        return
    common = [
        "--pairs",
        str(args.pairs),
        "--replies",
        str(args.replies),
        "--rounds",
        str(args.rounds),
        "--baseline-pairs",
        str(args.baseline_pairs),
        "--workdir",
        args.workdir,
    ]
    results = {}
    for name in args.only.split(","):
        out = subprocess.run(
            [sys.executable, __file__, "--case", name, *common], capture_output=True, text=True, check=True
        )
        results[name] = json.loads(out.stdout.strip().splitlines()[-1])
        print(results[name], flush=True)
    if {"preflab", "rewardbench"} <= set(results):
        mine, theirs = results["preflab"], results["rewardbench"]
        print(
            f"{mine['pairs']:,} pairs: preflab {mine['total_s']} s (scoring {mine['scoring_s']} s, bench with "
            f"{mine['rounds']:,} bootstrap rounds {mine['bench_s']} s, peak RSS {mine['peak_rss_mb']} MB); "
            f"RewardBench's path {theirs['scaled_s']} s (scaled from {theirs['pairs']:,} pairs); "
            f"ratio {theirs['scaled_s'] / mine['total_s']:.1f}×"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
