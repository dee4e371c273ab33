"""Batched candidate generation (left padding) against one prompt at a time.

Usage: python bench/bench_generate.py [--model smollm2-135m-instruct] [--prompts 8] [--batch-size 8]
                                      [--max-new-tokens 32] [--threads N]

Both sample one response per prompt with the same settings (temperature 0.7,
top-p 0.9, the chat template) through `preflab.labelling.generation.sample_responses`:
the fast path passes `--batch-size` prompts per `generate` call, the baseline one.
Prints generated tokens/s for each and the ratio. Runs on the GPU when there is
one, else on the CPU.
"""

from __future__ import annotations

import argparse
import json
import time
from importlib.resources import files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args()

    import torch

    from preflab.labelling.generation import GenerateConfig, sample_responses
    from preflab.lm.loading import load_causal_lm

    if args.threads:
        torch.set_num_threads(args.threads)
    lines = (files("preflab.db.samples") / "prompts.jsonl").read_text(encoding="utf-8").splitlines()
    prompts = [json.loads(line)["prompt"] for line in lines if line.strip()]
    prompts = [prompts[i % len(prompts)] for i in range(args.prompts)]
    start = time.perf_counter()
    model, tokenizer = load_causal_lm(args.model)
    print(
        f"model {args.model} loaded in {time.perf_counter() - start:.1f} s on {model.device} "
        f"({torch.get_num_threads()} CPU threads, torch {torch.__version__})"
    )
    config = GenerateConfig(max_new_tokens=args.max_new_tokens)
    sample_responses(model, tokenizer, prompts[:1], config, seed=0)  # warm-up

    def run(batch_size: int) -> tuple[int, float]:
        tokens, start = 0, time.perf_counter()
        for i in range(0, len(prompts), batch_size):
            tokens += sum(
                r.tokens for r in sample_responses(model, tokenizer, prompts[i : i + batch_size], config, seed=i)
            )
        return tokens, time.perf_counter() - start

    batched_tokens, batched_s = run(args.batch_size)
    single_tokens, single_s = run(1)
    fast, slow = batched_tokens / batched_s, single_tokens / single_s
    print(
        f"batched ({args.batch_size} per call): {batched_tokens:5d} tokens in {batched_s:7.2f} s   {fast:8.1f} tokens/s"
    )
    print(f"one prompt at a time:    {single_tokens:5d} tokens in {single_s:7.2f} s   {slow:8.1f} tokens/s")
    print(f"ratio: batched {fast / slow:.1f}x the tokens/s")
    figures = {
        "batched": {"tokens": batched_tokens, "seconds": batched_s},
        "single": {"tokens": single_tokens, "seconds": single_s},
    }
    if torch.cuda.is_available():
        print(f"peak GPU memory: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB ({torch.cuda.get_device_name()})")
    else:
        print("GPU: not measured (no CUDA device here)")
    print(json.dumps({"model": args.model, "prompts": args.prompts, "batch_size": args.batch_size, **figures}))


if __name__ == "__main__":
    main()
