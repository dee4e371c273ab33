"""Two vLLM servers behind one run (`--api-base A,B`) against one, side by side; then one of the two killed mid-run.

Usage: python bench/bench_engine_servers.py [--prompts 64] [--candidates 4] [--max-new-tokens 64]
                                            [--concurrency 64] [--repeats 1] [--no-kill]
                                            [--model smollm2-135m-instruct] [--start-timeout 600]
       python bench/bench_engine_servers.py --servers URL,URL --served-model NAME …   # servers already running

Two vLLM OpenAI-compatible servers start from vLLM's venv (as bench_engine_vllm.py starts one: `--enforce-eager`,
1 GiB of KV cache, KV blocks of 32 tokens), each on one core of its own: the server and every process it starts
pinned there (`taskset -c 0` and `-c 1`, and VLLM_CPU_OMP_THREADS_BIND to match), serving the same model folder.
One server is one core's worth, as one machine is one machine's: the bench measures what a second server adds,
not what a second core adds to one server. (Unpinned, one vLLM server alone keeps both cores busy, its engine's
threads spinning, and a second server then adds 1.5–1.7x: see bench/README.md.)

`generate` (preflab's own job, `run_generation` with `--engine openai`) of
`--prompts` prompts × `--candidates` samples × at most `--max-new-tokens` tokens runs into a fresh SQLite store
on server A alone, then on A and B together, in turn (`--repeats` times each, alternating), with `--concurrency`
requests in flight on each server (so each is as busy as A alone); generated tokens/s of each, and the ratio
two / one (goal, issue 49: >= 1.7x).

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
from bench_engine_vllm import group_cpu_seconds, start_vllm, uptime, warm_server
from engine_inputs import fresh_store, prompt_variants, sample_pool
from vllm_process import SERVED_MODEL

GOAL = 1.7


def start_bound(model_dir: Path, log: Path, core: int, timeout: float):
    """A vLLM server on core `core` only, its HTTP front end, engine and worker all pinned there; (process, /v1 URL)."""
    return start_vllm(model_dir, log, timeout, block_size=32, cpus=str(core))


def generate(url: str, served: str, args, store: Path, texts: list[str], groups=(), during=None) -> dict:
    """`run_generation` on the servers at `url` (comma-separated) into a fresh store: its figures, with the CPU
    seconds the servers' process groups `groups` (each server with its engine and worker) took meanwhile."""
    from sqlalchemy import func, select

    from preflab.db.models import Candidate
    from preflab.labelling.generation import GenerateConfig, run_generation
    from preflab.lm.engines import EngineConfig

    sessions = fresh_store(store, [{"prompt": t} for t in texts])
    config = GenerateConfig(n=args.candidates, max_new_tokens=args.max_new_tokens)
    servers = len(url.split(","))  # each server as busy as the one alone: --concurrency in flight on each
    engine = EngineConfig(engine="openai", api_base=url, model=served, concurrency=args.concurrency * servers)
    watcher = threading.Thread(target=during, args=(sessions,), daemon=True) if during else None
    if watcher:
        watcher.start()
    cpu = [group_cpu_seconds(g) for g in groups]
    began = time.perf_counter()
    summary = run_generation(sessions, served, config, engine=engine)
    seconds = time.perf_counter() - began
    cpu = [group_cpu_seconds(g) - before for g, before in zip(groups, cpu)]
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
        "server_cores": [round(c / seconds, 2) for c in cpu],  # each server's CPU seconds a second of the run
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--candidates", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=64, help="requests in flight per server")
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
            f"{args.concurrency} in flight on each server",
            flush=True,
        )
        runs: dict[str, list[dict]] = {"one": [], "two": []}
        for repeat in range(args.repeats):
            for side, url in (("one", a), ("two", f"{a},{b}")):
                groups = [p.pid for p, _ in processes][: 1 if side == "one" else 2]
                row = generate(url, served, args, workdir / f"{side}-{repeat}.db", texts, groups)
                runs[side].append(row)
                print(f"  {side} server{'s' if side == 'two' else ''}: {json.dumps(row)}", flush=True)
        rate = {side: statistics.median(r["tokens_per_s"] for r in rows) for side, rows in runs.items()}
        ratio = rate["two"] / rate["one"]
        print(
            f"  tokens/s: one server {rate['one']:.1f}, two {rate['two']:.1f}; ratio {ratio:.2f}x "
            f"(goal >= {GOAL}x: {'met' if ratio >= GOAL else 'NOT met'})"
        )
        if processes:  # what bounds the ratio on this machine: the cores one server takes alone
            alone = statistics.median(r["server_cores"][0] for r in runs["one"])
            print(
                f"  one server alone kept {alone:.2f} of {os.cpu_count()} cores busy (its API server, engine, worker)"
            )
        killed = None
        if processes and not args.no_kill:
            wanted = runs["one"][0]["stored"]  # what a run stores (samples with the same text are one candidate)

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
            killed.pop("server_cores")
            print(f"  two servers, B killed mid-run: {json.dumps(killed)}")
            print(
                f"  finished on A: {killed['stored']:,} candidates stored (one server alone: {wanted:,}), "
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
