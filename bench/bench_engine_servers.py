"""Two vLLM servers behind one run (`--api-base A,B`) against one, side by side; then one of the two killed mid-run.

Usage: python bench/bench_engine_servers.py [--prompts 64] [--candidates 4] [--max-new-tokens 64]
                                            [--concurrency 64] [--repeats 1] [--no-kill]
                                            [--model smollm2-135m-instruct] [--start-timeout 600]
       python bench/bench_engine_servers.py --servers URL,URL --served-model NAME …   # servers already running

Two vLLM OpenAI-compatible servers start from vLLM's venv (as bench_engine_vllm.py starts one: `--enforce-eager`,
1 GiB of KV cache, KV blocks of 32 tokens), each bound to one core of its own (VLLM_CPU_OMP_THREADS_BIND=0 and
=1), serving the same model folder. `generate` (preflab's own job, `run_generation` with `--engine openai`) of
`--prompts` prompts × `--candidates` samples × at most `--max-new-tokens` tokens runs into a fresh SQLite store
on server A alone, then on A and B together, in turn (`--repeats` times each, alternating); generated tokens/s
of each, and the ratio two / one (goal, issue 49: >= 1.7x).

Then (unless `--no-kill`) a third run on A and B, with B killed (SIGKILL of its process group) once a quarter of
the answers are stored: the run must finish on A with every sample stored once, and name B as the server that
stopped answering. With `--servers`, the servers are not this bench's to bind or kill: it measures one against
the list only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path

import vllm_process
from bench_engine_vllm import start_vllm, uptime, warm_server
from engine_inputs import fresh_store, prompt_variants, sample_pool
from vllm_process import SERVED_MODEL

GOAL = 1.7


def start_bound(model_dir: Path, log: Path, core: int, timeout: float):
    """A vLLM server computing on core `core` only; (process, /v1 URL)."""
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(core)  # read by vLLM from the environment it inherits
    try:
        return start_vllm(model_dir, log, timeout, block_size=32)
    finally:
        os.environ.pop("VLLM_CPU_OMP_THREADS_BIND", None)


def generate(url: str, served: str, args, store: Path, texts: list[str], during=None) -> dict:
    """`run_generation` on the servers at `url` (comma-separated) into a fresh store: its figures."""
    from sqlalchemy import func, select

    from preflab.db.models import Candidate
    from preflab.labelling.generation import GenerateConfig, run_generation
    from preflab.lm.engines import EngineConfig

    sessions = fresh_store(store, [{"prompt": t} for t in texts])
    config = GenerateConfig(n=args.candidates, max_new_tokens=args.max_new_tokens)
    engine = EngineConfig(engine="openai", api_base=url, model=served, concurrency=args.concurrency)
    watcher = threading.Thread(target=during, args=(sessions,), daemon=True) if during else None
    if watcher:
        watcher.start()
    began = time.perf_counter()
    summary = run_generation(sessions, served, config, engine=engine)
    seconds = time.perf_counter() - began
    if watcher:
        watcher.join()
    with sessions() as session:
        stored = session.scalar(select(func.count()).select_from(Candidate))
    return {
        "seconds": round(seconds, 2),
        "tokens": summary.tokens,
        "tokens_per_s": round(summary.tokens / seconds, 1),
        "stored": stored,
        "failed": summary.failed + summary.quarantined,
        "servers_lost": (summary.engine or {}).get("servers_lost", []),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--candidates", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=64, help="requests in flight, both servers together")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each side, alternating")
    parser.add_argument("--no-kill", action="store_true", help="leave out the run with one server killed")
    parser.add_argument("--model", default=SERVED_MODEL, help="embedded name or model folder to serve")
    parser.add_argument("--servers", help="two running servers, comma-separated, instead of starting them")
    parser.add_argument("--served-model", default=SERVED_MODEL, help="with --servers: the served model's name")
    parser.add_argument("--start-timeout", type=float, default=600)
    args = parser.parse_args()

    from preflab.lm.loading import resolve_model_path

    workdir = Path(tempfile.mkdtemp(prefix="bench-engine-servers-"))
    texts = [t for _, t in prompt_variants(list(sample_pool()), args.prompts)]
    print(f"{os.cpu_count()} cores; stores and logs under {workdir}")
    print(f"before: {uptime()}")
    processes = []
    if args.servers:
        a, b = (u.strip().rstrip("/") for u in args.servers.split(","))
        served = args.served_model
    else:
        model_dir = Path(resolve_model_path(args.model))
        served = SERVED_MODEL
        for core in (0, 1):
            began = time.monotonic()
            processes.append(start_bound(model_dir, workdir / f"vllm-{core}.log", core, args.start_timeout))
            print(f"server {'AB'[core]} on core {core}: /health after {time.monotonic() - began:.0f} s")
        (_, a), (_, b) = processes
    try:
        for url in (a, b):
            warm_server(url, served)
        print(
            f"\ngenerate: {len(texts)} prompts x {args.candidates} samples x <= {args.max_new_tokens} new tokens, "
            f"{args.concurrency} in flight",
            flush=True,
        )
        runs: dict[str, list[dict]] = {"one": [], "two": []}
        for repeat in range(args.repeats):
            for side, url in (("one", a), ("two", f"{a},{b}")):
                row = generate(url, served, args, workdir / f"{side}-{repeat}.db", texts)
                runs[side].append(row)
                print(f"  {side} server{'s' if side == 'two' else ''}: {json.dumps(row)}", flush=True)
        rate = {side: statistics.median(r["tokens_per_s"] for r in rows) for side, rows in runs.items()}
        ratio = rate["two"] / rate["one"]
        print(
            f"  tokens/s: one server {rate['one']:.1f}, two {rate['two']:.1f}; ratio {ratio:.2f}x "
            f"(goal >= {GOAL}x: {'met' if ratio >= GOAL else 'NOT met'})"
        )
        killed = None
        if processes and not args.no_kill:
            wanted = len(texts) * args.candidates

            def kill_b(sessions) -> None:
                from sqlalchemy import func, select

                from preflab.db.requests import EngineRequest

                deadline = time.monotonic() + 600
                while time.monotonic() < deadline:  # answers are committed as they arrive (every half second)
                    with sessions() as session:
                        if session.scalar(select(func.count()).select_from(EngineRequest)) >= wanted // 4:
                            break
                    time.sleep(0.1)
                os.killpg(processes[1][0].pid, signal.SIGKILL)

            killed = generate(f"{a},{b}", served, args, workdir / "killed.db", texts, during=kill_b)
            print(f"  two servers, B killed mid-run: {json.dumps(killed)}")
            print(
                f"  finished on A: {killed['stored']:,} of {wanted:,} samples stored, "
                f"{killed['failed']} failed; servers said to have stopped: {killed['servers_lost']}"
            )
    finally:
        for process, _ in processes:
            vllm_process.stop(process)
    print(f"\nafter: {uptime()}")
    print(
        json.dumps({"one": rate["one"], "two": rate["two"], "ratio": round(ratio, 3), "goal": GOAL, "killed": killed})
    )


if __name__ == "__main__":
    main()
