"""The openai engine's own overhead: requests a second against a stub server that answers after 200 ms.

Usage: python bench/bench_engine_client.py [--concurrency 64] [--requests 3200] [--latency 0.2]
                                           [--baseline-requests 25] [--database sqlite|postgres]

The stub is tests/fault_app.py in a process of its own (uvicorn, one worker): every chat
completion is answered after `--latency` seconds, so a client with no overhead of its own
sustains concurrency / latency requests a second. The engine runs here, with its request
store on a fresh SQLite file (or Postgres schema), every request a new one (no cache hits),
each answer committed by the store's writer as it arrives, as in a real run.

Baseline, in the same run: the same engine at concurrency 1 (one request after another,
the sequential path). Printed for each: requests, seconds, requests/s, the ratio to
concurrency / latency, and this process's peak RSS; then a re-run of the concurrent asks,
all answered from the store (what a resumed run pays: nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from common import cpu_seconds, peak_rss_mb, postgres_schema_url
from worlds import free_port

ROOT = Path(__file__).resolve().parents[1]


def start_stub(latency: float) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "fault_app.py"), str(port), str(latency)],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{url}/models", timeout=1).read()
            return proc, url
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the stub server did not start") from None
            time.sleep(0.1)


def run(sessions, url: str, concurrency: int, requests: int, tag: str) -> dict:
    from preflab.lm.engines import EngineConfig, Generate, Sampling, open_engine

    config = EngineConfig(engine="openai", api_base=url, model="fault-model", concurrency=concurrency)
    asks = [Generate(f"{tag} question {i}: what is {i} + {i}?", Sampling(16, 0.7, 0.9, 1)) for i in range(requests)]
    with open_engine(config, sessions) as engine:
        engine.server()  # the one look at /v1/models, outside the timing
        start, cpu = time.perf_counter(), cpu_seconds()
        results = engine.generate(asks)
        seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
        stats = engine.stats
    failed = sum(1 for r in results if not hasattr(r, "text"))
    return {
        "concurrency": concurrency,
        "requests": stats.requests,
        "cache_hits": stats.cache_hits,
        "failed": failed,
        "seconds": seconds,
        "per_s": len(asks) / seconds,
        "rss": peak_rss_mb(),
        "cpu_ms": cpu / len(asks) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=3200)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--baseline-requests", type=int, default=25)
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    args = parser.parse_args()

    from preflab.db.engine import open_database, session_factory

    drop = None
    if args.database == "postgres":
        db_url, drop = postgres_schema_url()
    else:
        db_url = f"sqlite:///{Path(tempfile.mkdtemp(prefix='bench-engine-')) / 'bench.db'}"
    sessions = session_factory(open_database(db_url))
    stub, url = start_stub(args.latency)
    try:
        baseline = run(sessions, url, 1, args.baseline_requests, "baseline")
        fast = run(sessions, url, args.concurrency, args.requests, "concurrent")
        cached = run(sessions, url, args.concurrency, args.requests, "concurrent")
    finally:
        stub.terminate()
        stub.wait()
        if drop:
            drop()
    print(
        f"stub latency {args.latency * 1000:.0f} ms, store {args.database}, "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(
        f"{'side':<12} {'conc':>5} {'asks':>6} {'sent':>6} {'seconds':>8} {'asks/s':>8} {'of c/lat':>9} "
        f"{'peak RSS':>9} {'CPU/ask':>9}"
    )
    for name, row in (("baseline", baseline), ("engine", fast), ("re-run", cached)):
        ideal = row["concurrency"] / args.latency
        asks = row["requests"] + row["cache_hits"]
        print(
            f"{name:<12} {row['concurrency']:>5} {asks:>6} {row['requests']:>6} {row['seconds']:>8.2f} "
            f"{row['per_s']:>8.1f} {row['per_s'] / ideal:>9.2f} {row['rss']:>7.0f} MB {row['cpu_ms']:>6.2f} ms"
        )
    print(
        f"engine / baseline: {fast['per_s'] / baseline['per_s']:.1f}x requests/s; "
        f"failed: {baseline['failed'] + fast['failed'] + cached['failed']}; "
        f"goal: >= 250 requests/s (0.8 of {args.concurrency / args.latency:.0f}) at <= 300 MB"
    )
    print(f"the client's own CPU per request bounds it at {1000 / fast['cpu_ms']:.0f} requests/s on one free core")
    print(
        json.dumps(
            {"latency": args.latency, "database": args.database, "baseline": baseline, "engine": fast, "re_run": cached}
        )
    )


if __name__ == "__main__":
    main()
