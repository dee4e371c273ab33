"""preflab's judge on a Ray cluster: N Ray tasks, task K running `preflab judge KIND ... --shard K/N`.

Every task judges slice K of N of the prompts stored in one Postgres store, asking an OpenAI-compatible server
(vLLM, SGLang, TGI, ...). Install preflab with its `ray` extra on every node (`pip install '.[ray]'` in a
checkout, or your image), import the prompts (and generate) once, then, on any machine that reaches the cluster:

    export PREFLAB_DATABASE_URL=postgresql+psycopg://preflab@db.internal/preflab
    export OPENAI_API_KEY=...    # only if the server asks for one
    python examples/ray/judge.py --address auto --shards 8 -- \\
        pairwise --engine openai --api-base http://gpu01:8000/v1 --model Qwen/Qwen2.5-7B-Instruct

What follows `--` goes to `preflab judge` unchanged. PREFLAB_DATABASE_URL, OPENAI_API_KEY, OPENAI_BASE_URL,
PREFLAB_MODEL and PREFLAB_ENGINE reach the tasks from this environment when set (Ray's runtime_env); the key is
never printed. Each task runs the command as a subprocess of its Ray worker: the same command as typed by hand,
its failures its own. A worker that dies (a node lost, the OOM killer, `kill -9`) takes its subprocess with it
(Ray 2.57 on, each worker's process group is cleaned up when it dies; on an older cluster, start its nodes with
RAY_process_group_cleanup_enabled=true), and Ray runs the task again, up to MAX_RETRIES times;
the new run asks only for what is not stored yet, reading back the answers the dead one stored. A command that
fails (a wrong option, a server that refuses) is not run again: the driver names the shards that failed and
exits 1. Each shard's summary is printed as it is collected, every line prefixed by `shard K/N:`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import ray

FORWARDED = ("PREFLAB_DATABASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "PREFLAB_MODEL", "PREFLAB_ENGINE")
MAX_RETRIES = 3  # runs of a shard after its worker died; a command that fails is never run again


@ray.remote(max_retries=MAX_RETRIES, retry_exceptions=False)
def judge_shard(k: int, n: int, judge_args: list[str]) -> tuple[int, str]:
    """Run `preflab judge JUDGE_ARGS --shard k/n` on a Ray worker: (its exit status, what it printed)."""
    command = [sys.executable, "-m", "preflab", "judge", *judge_args, "--shard", f"{k}/{n}"]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True)  # its progress (stderr) goes to Ray's logs
    return done.returncode, done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--address", default="auto", help="the cluster, as ray.init takes it: auto, HOST:6379, ray://…")
    parser.add_argument("--shards", type=int, required=True, help="N: one Ray task per slice of the prompts")
    parser.add_argument("judge_args", nargs=argparse.REMAINDER, help="after --: `preflab judge`'s own arguments")
    args = parser.parse_args(argv)
    judge_args = args.judge_args[1:] if args.judge_args[:1] == ["--"] else args.judge_args
    if args.shards < 1 or not judge_args:
        parser.error("give --shards N (N >= 1) and, after --, the judge's kind and options")

    env = {name: os.environ[name] for name in FORWARDED if name in os.environ}
    ray.init(address=args.address, runtime_env={"env_vars": env}, log_to_driver=True)
    n = args.shards
    runs = [judge_shard.remote(k, n, judge_args) for k in range(n)]
    failed = []
    for k, run in enumerate(runs):
        try:
            code, out = ray.get(run)
            why = f"exit status {code}"
        except ray.exceptions.RayError as error:  # its worker died MAX_RETRIES + 1 times, or its node is gone
            code, out, why = None, "", type(error).__name__
        for line in out.strip().splitlines():
            print(f"shard {k}/{n}: {line}", flush=True)
        if code != 0:
            failed.append(f"{k}/{n}")
            print(f"shard {k}/{n}: failed ({why}; its error is in its log, which Ray forwards to stderr)", flush=True)
    if failed:
        print(
            f"{len(failed)} of {n} shards failed: {', '.join(failed)}. Run this again: a shard that finished finds "
            "nothing left to ask, one that died asks only for what is not stored yet",
            file=sys.stderr,
        )
        return 1
    print(f"all {n} shards judged", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
