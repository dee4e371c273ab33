"""bench_serve.py's load: the clients that post deliveries and time them, the servers' processes, the bare-app floor."""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from worlds import free_port

SECRET = "bench-serve-secret"
BARE_APP = """
from fastapi import FastAPI, Request
app = FastAPI()
@app.post("/webhook")
async def webhook(request: Request):
    await request.body()
    return {"stored": 0, "new": True}
@app.get("/health")
async def health():
    return {"status": "UP"}
"""


@dataclass(frozen=True)
class Event:
    annotation: int
    version: int  # 1: ANNOTATION_CREATED, 2: ANNOTATION_UPDATED
    body: bytes
    replay: bool = False


async def _post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, body: bytes) -> int:
    """One POST on a kept-alive connection; returns the status (a minimal HTTP/1.1 client: httpx's own CPU time
    per request would be a good part of what is measured on 2 cores)."""
    writer.write(head % len(body) + body)
    await writer.drain()
    status_line = await reader.readline()
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return int(status_line.split()[1])


async def send_deliveries(
    port: int, clients: list[list[Event]], rate: float = 0
) -> tuple[list[float], list[int], float]:
    """Each client on its own connection, one request at a time: as fast as answers come, or (`rate`: deliveries
    a second, all clients together) each at its share of that rate, on a schedule (a late answer is not waited
    out again: the next request goes at once)."""
    latencies, statuses = [], []
    head = (
        f"POST /webhook HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"X-Preflab-Secret: {SECRET}\r\nContent-Length: %d\r\n\r\n"
    ).encode()

    async def client(n: int, events: list[Event]) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        gap = len(clients) / rate if rate else 0.0
        due = time.perf_counter() + gap * n / len(clients)  # staggered starts
        try:
            for event in events:
                if gap:
                    await asyncio.sleep(max(0.0, due - time.perf_counter()))
                    due += gap
                began = time.perf_counter()
                statuses.append(await _post(reader, writer, head, event.body))
                latencies.append(time.perf_counter() - began)
        finally:
            writer.close()

    began = time.perf_counter()
    await asyncio.gather(*(client(n, events) for n, events in enumerate(clients)))
    return latencies, statuses, time.perf_counter() - began


def start_server(argv: list[str], env: dict, log: Path, port: int) -> subprocess.Popen:
    import httpx

    with log.open("ab") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the server exited while starting:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code in (200, 503):
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    sys.exit("the server did not answer /health within 60 s")


def stop_server(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def latency_stats(latencies: list[float], wall: float) -> dict:
    ordered = sorted(latencies)
    q = statistics.quantiles(ordered, n=100, method="inclusive")
    return {
        "requests": len(ordered),
        "p50_ms": round(q[49] * 1000, 1),
        "p99_ms": round(q[98] * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
        "wall_s": round(wall, 2),
        "per_s": round(len(ordered) / wall, 1),
    }


def run_bare(clients: list[list[Event]], workdir: Path, rate: float) -> dict:
    app = workdir / "bare_app.py"
    app.write_text(BARE_APP)
    port = free_port()
    proc = start_server(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "bare_app:app",
            "--port",
            str(port),
            "--no-access-log",
            "--log-level",
            "warning",
        ],
        {**os.environ, "PYTHONPATH": str(workdir)},
        workdir / "bare.log",
        port,
    )
    try:
        latencies, statuses, wall = asyncio.run(send_deliveries(port, clients, rate))
    finally:
        stop_server(proc)
    assert set(statuses) == {200}, statuses
    return latency_stats(latencies, wall)
