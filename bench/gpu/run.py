"""The GPU run, ready to go: vLLM generation against in-process transformers, and DPO's MFU, as one JSON line.

Usage: bench/gpu/run.sh [--dry-run] [--api-base URL --served-model NAME --model DIR] [--budget-s 480]

On one CUDA GPU, in under 8 minutes (`--budget-s`, each part stopped at its share):

- generation: `bench_engine_vllm.py --only generate` for 500 prompts × 1 sample × ≤ 128 new tokens, a vLLM
  server (bf16, vLLM's own defaults on CUDA: `vllm_process.device_args`) against preflab's in-process
  transformers engine, same model folder (the embedded SmolLM2-135M-Instruct unless `--model`); vLLM from
  $PREFLAB_VLLM_PYTHON (a CUDA build of vLLM: `pip install vllm` in a venv of its own), or `--api-base`;
- DPO: `bench_dpo_gpu.py --size auto`, the largest Qwen2.5 shape whose training fits the GPU, 20 steps each of
  TRL's defaults and preflab's settings: tokens/s, MFU and peak memory.

It prints each part's own report on stderr, then one JSON line on stdout: {"device", "seconds",
"generate": {...}, "dpo": {...}}, a part that could not run holding {"error": why}. `--dry-run` runs the same
script on the CPU at a tiny size (a few prompts; the DPO bench's own dry run), so the tests run it and it
cannot rot; on the CPU, generation needs `--api-base` (the tests' vLLM server), and says so without one.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
FULL = {
    "generate": [
        *("--only", "generate", "--prompts", "500", "--candidates", "1", "--max-new-tokens", "128"),
        *("--concurrency", "256", "--batch-size", "64"),  # a GPU's share: vLLM's batch, and the in-process one
    ],
    "dpo": ["--size", "auto", "--steps", "20", "--pairs", "320"],
}
TINY = {
    "generate": ["--only", "generate", "--prompts", "2", "--candidates", "1", "--max-new-tokens", "4"],
    "dpo": ["--dry-run"],
}
SHARE = {"generate": 0.5, "dpo": 0.5}  # of the budget


def last_json(text: str) -> dict | None:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None


def part(script: str, args: list[str], timeout: float) -> dict:
    """Run one bench; its last JSON line, or {"error": why}. Its own report goes to stderr."""
    try:
        done = subprocess.run(
            [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"{script} did not finish within {timeout:.0f} s"}
    sys.stderr.write(done.stdout + done.stderr[-4000:])
    found = last_json(done.stdout)
    if done.returncode != 0 or found is None:
        return {"error": f"{script} exited {done.returncode}: {done.stderr.strip().splitlines()[-1:] or ['']}"}
    return found


def device() -> str:
    if not shutil.which("nvidia-smi"):
        return "cpu"
    found = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"], capture_output=True, text=True
    )
    return found.stdout.strip().splitlines()[0] if found.returncode == 0 and found.stdout.strip() else "cuda"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="the CPU at a tiny size: checks the script")
    parser.add_argument("--api-base", help="a running vLLM server instead of starting one")
    parser.add_argument("--served-model", help="with --api-base: the served model's name")
    parser.add_argument("--model", help="the model folder (or embedded name) served and loaded")
    parser.add_argument("--budget-s", type=float, default=480, help="seconds for the whole run")
    args = parser.parse_args()

    began = time.monotonic()
    where = device()
    sizes = TINY if args.dry_run else FULL
    served = ["--api-base", args.api_base] if args.api_base else []
    served += ["--served-model", args.served_model] if args.served_model else []
    served += ["--model", args.model] if args.model else []
    out: dict = {"device": where, "dry_run": args.dry_run}
    if where == "cpu" and not args.dry_run:
        out["error"] = "no CUDA GPU here (nvidia-smi is not on the PATH): run it on a GPU machine, or pass --dry-run"
    elif where == "cpu" and not args.api_base:
        out["generate"] = {"error": "on the CPU, generation needs a running vLLM server: pass --api-base"}
    else:
        out["generate"] = part("bench_engine_vllm.py", sizes["generate"] + served, args.budget_s * SHARE["generate"])
    if "error" not in out:
        left = args.budget_s - (time.monotonic() - began)
        out["dpo"] = part("bench_dpo_gpu.py", sizes["dpo"], max(left, 60))
    out["seconds"] = round(time.monotonic() - began, 1)
    print(json.dumps(out))
    sys.exit(1 if "error" in out else 0)


if __name__ == "__main__":
    main()
