"""The one-forward-pass pairwise judge against a judge that decodes its verdict as text.

Usage: python bench/bench_judges.py [--model smollm2-135m-instruct] [--pairs 16] [--batch-size 8]
                                    [--max-new-tokens 8] [--threads N]

Both judges see the same judge prompts (every pair in both orders, batched the
same way) on the same model:
- fast path: `prob_first_better` reads P("A") vs P("B") from one forward pass
  per batch (`logits_to_keep=1`, no decoding);
- baseline: `verdicts_by_generation` decodes up to `--max-new-tokens` tokens
  greedily and reads the first "A" or "B" in the text.
Prints pairs/s (a pair = both orders) for each, the ratio, and how often the two
verdicts agree. Runs on the GPU when there is one, else on the CPU.
"""

from __future__ import annotations

import argparse
import time

FACTS = [
    ("What is the capital of France?", "The capital of France is Paris.", "The capital of France is London."),
    ("How many legs does a spider have?", "A spider has eight legs.", "A spider has six legs."),
    ("What is 2 + 2?", "2 + 2 = 4.", "2 + 2 = 5."),
    ("What color is the sky on a clear day?", "The sky is blue.", "The sky is green."),
    ("What is the largest planet in our solar system?", "Jupiter is the largest planet.", "Mars is."),
    ("How many days are in a week?", "There are seven days in a week.", "There are ten days in a week."),
    ("What do bees make?", "Bees make honey.", "Bees make milk."),
    ("At what temperature does water freeze in Celsius?", "At 0 degrees Celsius.", "At 50 degrees Celsius."),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args()

    import torch

    from preflab.labelling.judges.pairwise import judge_text, prob_first_better, verdicts_by_generation
    from preflab.training.models.loading import load_causal_lm

    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    model, tokenizer = load_causal_lm(args.model)
    print(f"model {args.model} loaded in {time.perf_counter() - start:.1f} s on {model.device} "
          f"({torch.get_num_threads()} CPU threads, torch {torch.__version__})")
    pairs = [FACTS[i % len(FACTS)] for i in range(args.pairs)]
    texts = [judge_text(tokenizer, q, a, b) for q, a, b in pairs] + [judge_text(tokenizer, q, b, a) for q, a, b in pairs]
    prob_first_better(model, tokenizer, texts[:2], args.batch_size)  # warm-up

    start = time.perf_counter()
    probs = prob_first_better(model, tokenizer, texts, args.batch_size)
    fast = time.perf_counter() - start
    start = time.perf_counter()
    verdicts = verdicts_by_generation(model, tokenizer, texts, args.batch_size, args.max_new_tokens)
    slow = time.perf_counter() - start

    agree = sum(v is not None and (v == 1.0) == (p > 0.5) for p, v in zip(probs, verdicts))
    unparsed = sum(v is None for v in verdicts)
    n = len(pairs)
    print(f"one forward pass (letter probabilities): {fast:8.2f} s   {n / fast:8.2f} pairs/s")
    print(f"decoded verdict ({args.max_new_tokens} new tokens, greedy):  {slow:8.2f} s   {n / slow:8.2f} pairs/s")
    print(f"ratio: forward pass {slow / fast:.1f}x faster; verdicts agree on {agree}/{len(texts)} orders, "
          f"{unparsed} decoded verdicts had no letter")
    first = sum(p > 0.5 for p in probs) / len(probs)
    print(f"position bias: the first answer is preferred in {first:.0%} of orders")
    if not torch.cuda.is_available():
        print("GPU: not measured (no CUDA device here)")


if __name__ == "__main__":
    main()
