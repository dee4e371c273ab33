"""The judges' one-forward-pass fast paths against judges that decode text, on the same inputs.

Usage: python bench/bench_judges.py [--model smollm2-135m-instruct] [--only pairwise|score]
                                    [--pairs 16] [--batch-size 8] [--max-new-tokens 8]
                                    [--score-prompts 4] [--samples 3] [--judge-max-new-tokens 192]
                                    [--threads N]

Pairwise (every pair in both orders, batched the same way, same model):
- fast path: the judge's own reading on the transformers engine, the verdict held to
  "A" or "B" (`Logprobs(choices=...)`): P("A") vs P("B") from one forward pass per
  batch (`logits_to_keep=1`, the shared rubric run once, no decoding);
- baseline: decode up to `--max-new-tokens` tokens greedily and read the first "A"
  or "B" in the text.
Prints pairs/s (a pair = both orders) for each, the ratio, and how often the two
verdicts agree.

Score (the additive 5-point prompt), on the candidates of the first
`--score-prompts` prompts of the bundled sample rankings (imported into a fresh
SQLite file with `preflab import rankings`'s code), both judged by the real job:
- fast path: `--method expected`, the probability-weighted mean of the score
  tokens 0-5 after "Score: ", one forward pass per candidate (the rubric every
  prompt shares is run once and cached);
- baseline: `--method sampled`, k = `--samples` sampled replies per candidate
  (with the judge's default retries for replies without a score);
- and the expected judge's forward pass without the shared-rubric cache.
Prints, side by side from `judge_report`: time per candidate, agreement with the
people who ranked those prompts, candidates left unscored, parse failures, and
the probability mass on the score tokens. Runs on the GPU when there is one,
else on the CPU.
"""

from __future__ import annotations

import argparse
import json
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


def pairwise_bench(args, model, tokenizer) -> dict:
    import math

    from preflab.labelling.judges.pairwise import VERDICT, judge_messages, judge_text
    from preflab.lm.engines import Logprobs, open_engine
    from preflab.lm.names import NamedModel

    pairs = [FACTS[i % len(FACTS)] for i in range(args.pairs)]
    asked = [judge_messages(q, a, b) for q, a, b in pairs] + [judge_messages(q, b, a) for q, a, b in pairs]
    engine = open_engine(model=NamedModel(args.model, args.model, None, model, tokenizer), batch_size=args.batch_size)

    def first_better(messages) -> list[float]:
        answers = engine.top_logprobs([Logprobs(m, choices=VERDICT) for m in messages])
        return [1 / (1 + math.exp(read["B"] - read["A"])) for read in (a.choice_logprobs(VERDICT) for a in answers)]

    first_better(asked[:2])  # warm-up

    start = time.perf_counter()
    probs = first_better(asked)
    fast = time.perf_counter() - start
    texts = [judge_text(tokenizer, q, a, b) for q, a, b in pairs] + [
        judge_text(tokenizer, q, b, a) for q, a, b in pairs
    ]
    start = time.perf_counter()
    verdicts = decoded_verdicts(model, tokenizer, texts, args.batch_size, args.max_new_tokens)
    slow = time.perf_counter() - start

    agree = sum(v is not None and (v == 1.0) == (p > 0.5) for p, v in zip(probs, verdicts))
    unparsed = sum(v is None for v in verdicts)
    n = len(pairs)
    print(f"one forward pass (letter probabilities): {fast:8.2f} s   {n / fast:8.2f} pairs/s")
    print(f"decoded verdict ({args.max_new_tokens} new tokens, greedy):  {slow:8.2f} s   {n / slow:8.2f} pairs/s")
    print(
        f"ratio: forward pass {slow / fast:.1f}x faster; verdicts agree on {agree}/{len(texts)} orders, "
        f"{unparsed} decoded verdicts had no letter"
    )
    first = sum(p > 0.5 for p in probs) / len(probs)
    print(f"position bias: the first answer is preferred in {first:.0%} of orders")
    return {
        "pairs": n,
        "forward_s": fast,
        "decoded_s": slow,
        "agree": agree,
        "orders": len(texts),
        "unparsed": unparsed,
    }


def decoded_verdicts(model, tokenizer, texts: list[str], batch_size: int, max_new_tokens: int) -> list[float | None]:
    """The baseline: decode the verdict as text (greedy) and read the first A or B (1.0 = A)."""
    import re

    from preflab.lm.replies import by_length
    from preflab.lm.sampling import generate_texts

    out: list[float | None] = [None] * len(texts)
    for part in by_length([tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts], batch_size):
        replies = generate_texts(
            model, tokenizer, [texts[i] for i in part], max_new_tokens=max_new_tokens, do_sample=False
        )
        for i, g in zip(part, replies):
            found = re.search(r"\b([AB])\b", g.text)
            out[i] = None if found is None else float(found.group(1) == "A")
    return out


def score_bench(args, model, tokenizer, label: str) -> dict:
    import tempfile
    from importlib.resources import files
    from pathlib import Path

    from preflab.db.engine import open_database, session_factory
    from preflab.db.ingest.jsonl import import_file, import_rankings_batch
    from preflab.labelling.judges.prompts import ANSWER_START
    from preflab.labelling.judges.report import judge_report
    from preflab.labelling.judges.run import judge_candidates
    from preflab.labelling.judges.score import SCORE_CHOICES, ScoreConfig, grading_text
    from preflab.labelling.selection import prompts_with_candidates
    from preflab.lm.forward import choice_tokens, next_token_logprobs

    folder = Path(tempfile.mkdtemp(prefix="bench-judges-"))
    sessions = session_factory(open_database(f"sqlite:///{folder / 'bench.db'}"))
    imported = import_file(sessions, Path(str(files("preflab.db.samples") / "rankings.jsonl")), import_rankings_batch)
    with sessions.begin() as session:
        items = prompts_with_candidates(session)[: args.score_prompts]
    ids = [item.prompt_id for item in items]
    candidates = sum(len(item.candidate_ids) for item in items)
    print(
        f"sample rankings: {imported.read} rankings imported; judging {candidates} candidates of {len(items)} prompts"
    )

    rows = {}
    for method in ("expected", "sampled"):
        config = ScoreConfig(
            method=method, n=args.samples, max_new_tokens=args.judge_max_new_tokens, batch_size=args.batch_size
        )
        summary = judge_candidates(sessions, "score", model, tokenizer, label, config, ids)
        with sessions.begin() as session:
            (rows[method],) = judge_report(session, [summary.annotator_id])
        rows[method]["wall"] = summary.seconds
        rows[method]["unscored"] = summary.unscored

    # The expected judge's forward pass again, every text in full (no cache of the shared rubric).
    start_ids, variants = choice_tokens(tokenizer, ANSWER_START, SCORE_CHOICES)
    wanted = [i for options in variants for i in options]
    texts = [grading_text(tokenizer, item, text, False) for item in items for text in item.texts]
    timings = {}
    for share in (True, False):
        start = time.perf_counter()
        next_token_logprobs(model, tokenizer, texts, wanted, args.batch_size, then=start_ids, share_prefix=share)
        timings[share] = (time.perf_counter() - start) / len(texts)

    print(
        f"{'method':<34} {'s/candidate':>11} {'agrees with people':>22} {'tau':>6} {'unscored':>8} "
        f"{'parse failures':>14} {'score mass':>10}"
    )
    for method, title in (
        ("expected", "expected (one forward pass)"),
        ("sampled", f"sampled (k = {args.samples}, <= {args.judge_max_new_tokens} tokens)"),
    ):
        m = rows[method]
        agree = m["human_agreement"]
        share = (
            "n/a"
            if agree["pairwise_agreement"] is None
            else f"{agree['pairwise_agreement']:.2f} of {agree['shared_pairs']} pairs"
        )
        print(
            f"{title:<34} {_fmt(m['seconds_per_candidate']):>11} {share:>22} {_fmt(agree['kendall_tau']):>6} "
            f"{m['unscored']:>8} {_fmt(m['parse_failure_rate']):>14} {_fmt(m['score_mass']):>10}"
        )
    fast, slow = rows["expected"]["seconds_per_candidate"], rows["sampled"]["seconds_per_candidate"]
    if fast and slow:  # a judge that scored no candidate has no time per candidate
        print(f"ratio: expected {slow / fast:.1f}x faster per candidate than sampled (k = {args.samples})")
    print(
        f"expected, forward pass only: {timings[True]:.2f} s/candidate with the shared rubric cached, "
        f"{timings[False]:.2f} s/candidate in full ({timings[False] / timings[True]:.1f}x)"
    )
    keep = ("seconds_per_candidate", "unscored", "parse_failure_rate", "score_mass", "human_agreement")
    return {
        "candidates": candidates,
        **{method: {k: rows[method][k] for k in keep} for method in rows},
        "forward_s_per_candidate": {"shared_rubric": timings[True], "in_full": timings[False]},
    }


def _fmt(value, spec: str = ".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--only", choices=("pairwise", "score"), help="Run one of the two benchmarks.")
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=8, help="pairwise baseline: decoded verdict length")
    parser.add_argument("--score-prompts", type=int, default=4, help="score: sample prompts whose candidates to judge")
    parser.add_argument("--samples", type=int, default=3, help="score baseline: sampled replies per candidate (k)")
    parser.add_argument("--judge-max-new-tokens", type=int, default=192, help="score baseline: longest reply")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args()

    import torch

    from preflab.lm.loading import load_causal_lm, model_label

    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    model, tokenizer = load_causal_lm(args.model)
    print(
        f"model {args.model} loaded in {time.perf_counter() - start:.1f} s on {model.device} "
        f"({torch.get_num_threads()} CPU threads, torch {torch.__version__})"
    )
    report = {"model": args.model}
    if args.only in (None, "pairwise"):
        report["pairwise"] = pairwise_bench(args, model, tokenizer)
    if args.only in (None, "score"):
        report["score"] = score_bench(args, model, tokenizer, model_label(args.model))
    if torch.cuda.is_available():
        print(f"peak GPU memory: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB ({torch.cuda.get_device_name()})")
    else:
        print("GPU: not measured (no CUDA device here)")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
