"""Served vLLM against in-process transformers: `generate` and `judge pairwise`, same model folder, same run.

Usage: python bench/bench_engine_vllm.py [--prompts 64] [--candidates 4] [--max-new-tokens 64] [--pairs 500]
                                         [--judge-candidates 4]
                                         [--only generate|judge] [--concurrency 64] [--batch-size 8]
                                         [--model smollm2-135m-instruct] [--api-base URL --served-model NAME]
                                         [--start-timeout 600] [--block-size 32]

Both sides run preflab's own jobs in this process, each into a fresh SQLite store of its own,
on the same input, with the same model folder (the embedded SmolLM2-135M-Instruct's converted
folder, ~/.cache/preflab/models/smollm2-135m-instruct):

- served: `run_generation` / `run_judge` with `--engine openai`, against a vLLM
  OpenAI-compatible server this bench starts from its own venv ($PREFLAB_VLLM_PYTHON, else
  ~/.cache/vllm-venv; `make vllm-venv`) with the settings the tests use on two cores
  (`--enforce-eager`, `--max-model-len 2048`, 1 GiB of KV cache, vLLM's own thread binding)
  and KV blocks of `--block-size` tokens (vLLM's CPU default, 128, reuses too little of a judge's
  prefix: see `start_vllm`), and stops at the end; `--api-base` uses a server already running instead;
- baseline: the same jobs with `--engine transformers`, the model loaded here once
  (the load and a warm-up are outside the timing, as the server's start is).

generate: `--prompts` prompts (the bundled sample prompts, varied by a suffix where more are
asked for) × `--candidates` samples × at most `--max-new-tokens` tokens, temperature 0.7, top-p 0.9;
prints generated tokens/s. judge pairwise: prompts with 4 candidates each (the bundled sample
responses, a prompt's own first), enough prompts for `--pairs` pairs, each pair asked in both
orders; prints pairs/s and the judge prompts' tokens read per second, and how often the two sides'
verdicts agree. For each side: wall seconds, CPU seconds of this process and of the server, and
the ratio served / in process. Goal (issue 41): served >= 5x in process for each.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from itertools import combinations
from pathlib import Path

import vllm_process
from common import cpu_seconds
from engine_inputs import JUDGE_CANDIDATES, fresh_store, judge_records, prompt_variants, sample_pool
from vllm_process import SERVED_MODEL
from worlds import free_port

GOAL = 5.0


# --- the server --------------------------------------------------------------------------------------------


def start_vllm(
    model_dir: Path, log: Path, timeout: float, block_size: int, cpus: str | None = None
) -> tuple[subprocess.Popen, str]:
    """vLLM's OpenAI-compatible server on a free loopback port, as the tests start it but for its KV cache's
    block size; (process, /v1 URL)."""
    # vLLM on the CPU caches prefixes in blocks of 128 tokens by default: a judge prompt's asks share ~190
    # (the rubric, the question and the reply shown first), so only one block would be reused. 32 is the
    # smallest block the CPU backend takes (16 fails at start-up).
    extra = ("--block-size", str(block_size)) if block_size else ()
    try:
        process, root = vllm_process.start(model_dir, log, free_port(), timeout, extra_args=extra, cpus=cpus)
    except vllm_process.VllmStartError as error:
        sys.exit(str(error))
    return process, f"{root}/v1"


def group_cpu_seconds(pgid: int | None) -> float:
    """CPU seconds of the live processes of a process group (the server and its engine), from /proc."""
    if pgid is None:
        return float("nan")
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def warm_server(url: str, model: str) -> None:
    """A short chat completion, and a verdict held to its choices (vLLM readies its grammar backend on the
    first), so no first-request cost lands in the timing, as the model's load and warm-up in process do not."""
    messages = [{"role": "user", "content": "Hello! Answer A or B."}]
    for extra in ({}, {"structured_outputs": {"choice": ["A", "B"]}, "logprobs": True, "top_logprobs": 5}):
        body = json.dumps({"model": model, "max_tokens": 8, "messages": messages, **extra}).encode()
        request = urllib.request.Request(f"{url}/chat/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as response:
            response.read()


# --- the two jobs ------------------------------------------------------------------------------------------


def timed(job, pgid: int | None) -> tuple[object, dict]:
    wall, cpu, server = time.perf_counter(), cpu_seconds(), group_cpu_seconds(pgid)
    result = job()
    return result, {
        "seconds": time.perf_counter() - wall,
        "cpu": cpu_seconds() - cpu,
        "server_cpu": group_cpu_seconds(pgid) - server,
    }


def run_generate(side: str, engine, model: str, args, workdir: Path, texts: list[str], cache, pgid) -> dict:
    from preflab.labelling.generation import GenerateConfig, run_generation

    sessions = fresh_store(workdir / f"generate-{side}.db", [{"prompt": t} for t in texts])
    config = GenerateConfig(n=args.candidates, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    summary, row = timed(lambda: run_generation(sessions, model, config, engine=engine, cache=cache), pgid)
    engine_stats = summary.engine or {}
    return {
        **row,
        "work": summary.tokens,
        "stored": summary.stored,
        "failed": summary.failed + summary.quarantined,
        "requests": engine_stats.get("requests"),
        "cache_hits": engine_stats.get("cache_hits"),
    }


def run_pairwise(side: str, engine, model: str, args, workdir: Path, records: list[dict], cache, pgid) -> dict:
    from preflab.labelling.judges.pairwise import PairwiseConfig
    from preflab.labelling.judges.run import run_judge

    sessions = fresh_store(workdir / f"judge-{side}.db", records)
    config = PairwiseConfig(batch_size=args.batch_size)
    result, row = timed(lambda: run_judge(sessions, "pairwise", config, model, engine=engine, cache=cache), pgid)
    engine_stats = result.summary.extra.get("engine") or {}
    return {
        **row,
        "work": result.measures["pairs_judged"],
        "abstentions": result.measures.get("abstentions") or 0,
        "ranked": result.summary.ranked,
        "requests": engine_stats.get("requests"),
        "cache_hits": engine_stats.get("cache_hits"),
        "verdicts": stored_verdicts(sessions),
    }


def stored_verdicts(sessions) -> dict[tuple[str, str, str], bool | None]:
    """(prompt, candidate, other candidate) -> whether the candidate won when shown first (None: abstained)."""
    from sqlalchemy import select

    from preflab.db.models import Candidate, Prompt, Ranking, RankingItem

    with sessions.begin() as session:
        texts = dict(session.execute(select(Candidate.id, Candidate.text)).all())
        rows = session.execute(
            select(Prompt.text, RankingItem.candidate_id, RankingItem.details)
            .join(Ranking, Ranking.id == RankingItem.ranking_id)
            .join(Prompt, Prompt.id == Ranking.prompt_id)
            .where(Ranking.source == "judge")
        ).all()
    out = {}
    for prompt, cid, details in rows:
        for entry in (details or {}).get("pairs", []):
            p = entry.get("p_as_a")
            out[(prompt, texts[cid], texts[entry["vs"]])] = None if p is None else p > 0.5
    return out


def judge_token_count(tokenizer, records: list[dict]) -> int:
    """Tokens of every judge prompt, both orders, in the model's chat format: what each side reads."""
    from preflab.labelling.judges.pairwise import judge_text

    texts = [
        judge_text(tokenizer, r["prompt"], r["responses"][i], r["responses"][j])
        for r in records
        for a, b in combinations(range(len(r["responses"])), 2)
        for i, j in ((a, b), (b, a))
    ]
    return sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)


# --- the report --------------------------------------------------------------------------------------------


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average: " + ", ".join(f"{v:.2f}" for v in os.getloadavg())


def report(task: str, unit: str, served: dict, local: dict, tokens: int | None = None) -> float:
    print(f"\n{task}")
    print(
        f"  {'side':<28} {unit:>8} {'wall s':>8} {unit + '/s':>10} {'CPU s here':>11} {'CPU s server':>13} "
        f"{'requests':>9} {'cache hits':>10}"
    )
    for name, row in (("served vLLM (--engine openai)", served), ("in-process (transformers)", local)):
        server = "-" if math.isnan(row["server_cpu"]) else f"{row['server_cpu']:.1f}"
        print(
            f"  {name:<28} {row['work']:>8,} {row['seconds']:>8.1f} {row['work'] / row['seconds']:>10.2f} "
            f"{row['cpu']:>11.1f} {server:>13} {row['requests'] if row['requests'] is not None else '-':>9} "
            f"{row['cache_hits'] if row['cache_hits'] is not None else '-':>10}"
        )
    ratio = (served["work"] / served["seconds"]) / (local["work"] / local["seconds"])
    if tokens:
        print(
            f"  judge prompt tokens read: {tokens:,}; served {tokens / served['seconds']:,.0f} tokens/s, "
            f"in process {tokens / local['seconds']:,.0f} tokens/s"
        )
    print(
        f"  ratio: served {ratio:.2f}x in process ({unit}/s); goal >= {GOAL:.0f}x: "
        f"{'met' if ratio >= GOAL else 'NOT met'}"
    )
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64, help="generate: prompts")
    parser.add_argument("--candidates", type=int, default=4, help="generate: samples per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="generate: longest sample")
    parser.add_argument("--pairs", type=int, default=500, help="judge pairwise: pairs (rounded up to whole prompts)")
    parser.add_argument(
        "--judge-candidates", type=int, default=JUDGE_CANDIDATES, help="judge pairwise: candidates per prompt"
    )
    parser.add_argument("--only", choices=("generate", "judge"), help="run one of the two")
    parser.add_argument("--concurrency", type=int, default=64, help="served: requests in flight")
    parser.add_argument(
        "--batch-size", type=int, default=8, help="in process: sequences per forward pass (the library's default)"
    )
    parser.add_argument("--model", default=SERVED_MODEL, help="embedded name or model folder, served and loaded")
    parser.add_argument("--api-base", help="use this running server (serving --model's folder) instead of starting one")
    parser.add_argument("--served-model", default=SERVED_MODEL, help="with --api-base: the served model's name")
    parser.add_argument("--start-timeout", type=float, default=600, help="seconds to wait for vLLM's /health")
    parser.add_argument(
        "--block-size", type=int, default=32, help="vLLM's KV cache block, in tokens (0: vLLM's default, 128 on CPU)"
    )
    args = parser.parse_args()

    import torch

    from preflab.labelling.generation import sample_responses
    from preflab.lm.engines import EngineConfig
    from preflab.lm.loading import resolve_model_path
    from preflab.lm.names import ModelCache
    from preflab.lm.sampling import SamplingConfig

    model_dir = Path(resolve_model_path(args.model))
    workdir = Path(tempfile.mkdtemp(prefix="bench-engine-vllm-"))
    pool = sample_pool()
    texts = [t for _, t in prompt_variants(list(pool), args.prompts)]
    records = judge_records(pool, args.pairs, candidates=args.judge_candidates)
    print(
        f"model folder {model_dir}; {os.cpu_count()} cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads); stores under {workdir}"
    )
    print(f"before: {uptime()}")

    process, pgid = None, None
    if args.api_base:
        url, served_name = args.api_base.rstrip("/"), args.served_model
    else:
        began = time.monotonic()
        process, url = start_vllm(model_dir, workdir / "vllm.log", args.start_timeout, args.block_size)
        pgid, served_name = process.pid, SERVED_MODEL
        print(f"vLLM answered /health {time.monotonic() - began:.0f} s after its start (log {workdir / 'vllm.log'})")
    try:
        warm_server(url, served_name)
        if pgid is not None:  # what the waiting server takes from the in-process side
            idle = group_cpu_seconds(pgid)
            time.sleep(5)
            print(f"idle server: {(group_cpu_seconds(pgid) - idle) / 5:.0%} of a core")
        began = time.monotonic()
        cache = ModelCache()
        model, tokenizer = cache.get(args.model)  # the key the jobs look it up by: the name they are given
        sample_responses(model, tokenizer, texts[:1], SamplingConfig(n=1, max_new_tokens=8), seed=0)  # warm-up
        print(f"in process: loaded and warmed in {time.monotonic() - began:.1f} s")
        served = EngineConfig(engine="openai", api_base=url, model=served_name, concurrency=args.concurrency)
        local = EngineConfig(engine="transformers")
        ratios, rates = {}, {}
        if args.only in (None, "generate"):
            print(
                f"\ngenerate: {len(texts)} prompts x {args.candidates} candidates x <= {args.max_new_tokens} "
                f"new tokens (temperature 0.7, top-p 0.9); served at concurrency {args.concurrency}, "
                f"in process {args.batch_size} sequences a batch",
                flush=True,
            )
            a = run_generate("served", served, served_name, args, workdir, texts, cache, pgid)
            b = run_generate("local", local, args.model, args, workdir, texts, cache, pgid)
            ratios["generate"] = report("generate", "tokens", a, b)
            rates["generate"] = {
                side: round(row["work"] / row["seconds"], 1) for side, row in (("served", a), ("local", b))
            }
            print(
                f"  candidates stored: served {a['stored']:,}, in process {b['stored']:,}; "
                f"served samples failed or refused: {a['failed']}"
            )
        if args.only in (None, "judge"):
            pairs = sum(math.comb(len(r["responses"]), 2) for r in records)
            print(
                f"\njudge pairwise: {len(records)} prompts x {args.judge_candidates} candidates = {pairs:,} pairs, "
                f"each in both orders",
                flush=True,
            )
            a = run_pairwise("served", served, served_name, args, workdir, records, cache, pgid)
            b = run_pairwise("local", local, args.model, args, workdir, records, cache, pgid)
            ratios["judge pairwise"] = report("judge pairwise", "pairs", a, b, judge_token_count(tokenizer, records))
            shared = [k for k in a["verdicts"] if k in b["verdicts"] and a["verdicts"][k] is not None]
            same = sum(a["verdicts"][k] == b["verdicts"][k] for k in shared)
            print(
                f"  verdicts (each order) agree on {same:,} of {len(shared):,} "
                f"({same / max(len(shared), 1):.1%}); served abstentions {a['abstentions']}"
            )
    finally:
        if process is not None:
            vllm_process.stop(process)
    print(f"\nafter: {uptime()}")
    print(
        "summary: "
        + "; ".join(f"{task} {ratio:.2f}x" for task, ratio in ratios.items())
        + f" (goal >= {GOAL:.0f}x each)"
    )
    print(json.dumps({"model": args.model, "served": served_name, "ratios": ratios, "rates": rates, "goal": GOAL}))


if __name__ == "__main__":
    main()
