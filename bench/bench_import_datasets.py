"""`preflab import dataset` on public-dataset-shaped files: rankings/s, Postgres ÷ SQLite, peak RSS.

Usage: python bench/bench_import_datasets.py [--rows 64000] [--messages 100000] [--response-chars 600]
                                             [--database sqlite|postgres|both] [--no-baseline] [--repeat 1]

Two files are generated (seeded): an UltraFeedback-shaped JSON Lines file (`--rows` rows, 4 completions
each, with the dataset's annotations) and an oasst2-shaped one (`--messages` message rows, in trees of 11:
a prompt, 3 ranked replies, two follow-ups with 3 and 2 ranked replies, so 3 rankings a tree). Each is
imported by `import_dataset` into a fresh store, in a child process whose peak RSS (`ru_maxrss`) is read.
The baseline, in the same run: the UltraFeedback rankings written as preflab's own JSON Lines (prompt,
responses, tiers, models, scores) and imported through `import rankings` (`import_file`); the dataset
import's rate is given as a multiple of it. With `--repeat N` each database runs every import N times,
interleaved, and the median is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_seconds, peak_rss_mb, postgres_schema_url

WORDS = [
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "for",
    "on",
    "with",
    "that",
    "as",
    "it",
    "be",
    "by",
    "this",
    "are",
    "from",
    "at",
    "or",
    "an",
    "which",
    "can",
    "you",
    "your",
    "not",
    "use",
    "will",
    "more",
    "one",
    "all",
    "time",
    "data",
    "model",
    "prime",
    "number",
    "answer",
    "question",
    "river",
    "water",
    "light",
    "sound",
    "color",
    "blue",
    "small",
    "large",
    "first",
    "second",
    "example",
    "because",
    "however",
    "therefore",
    "simple",
    "result",
    "value",
    "step",
    "list",
    "each",
]
MODELS = ("gpt-4", "gpt-3.5-turbo", "llama-2-70b-chat", "wizardlm-13b", "alpaca-7b", "falcon-40b-instruct")
ASPECTS = ("helpfulness", "honesty", "instruction_following", "truthfulness")


def words(rng: random.Random, chars: int) -> str:
    out, size = [], 0
    while size < chars:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


def ultrafeedback_row(rng: random.Random, i: int, chars: int) -> dict:
    completions = []
    for model in rng.sample(MODELS, 4):
        ratings = {a: str(rng.randint(1, 5)) for a in ASPECTS}
        annotations = {a: {"Rating": r, "Rationale": words(rng, 120)} for a, r in ratings.items()}
        annotations["helpfulness"].update({"Rationale For Rating": words(rng, 80), "Type": ["1", "2"]})
        fine = sum(int(r) for r in ratings.values()) / 4
        completions.append(
            {
                "annotations": annotations,
                "critique": words(rng, 200),
                "custom_system_prompt": "",
                "fine-grained_score": fine,
                "model": model,
                "overall_score": float(rng.randint(2, 20)) / 2,
                "principle": "helpfulness",
                "response": f"{i} {model}: {words(rng, chars)}",
            }
        )
    return {
        "source": "evol_instruct",
        "instruction": f"Question {i}: {words(rng, 160)}?",
        "models": [c["model"] for c in completions],
        "completions": completions,
        "correct_answers": ["None"],
        "incorrect_answers": ["None"],
    }


def baseline_line(row: dict, i: int) -> dict:
    """The same ranking as preflab's JSON Lines: what `import rankings` reads."""
    scores = [c["overall_score"] for c in row["completions"]]
    tiers = [[j for j, s in enumerate(scores) if s == v] for v in sorted(set(scores), reverse=True)]
    return {
        "prompt": row["instruction"],
        "responses": [c["response"] for c in row["completions"]],
        "ranking": tiers,
        "annotator": "openbmb/UltraFeedback:overall_score",
        "annotator_kind": "ai",
        "model": [c["model"] for c in row["completions"]],
        "scores": scores,
        "id": str(i),
    }


def oasst_tree(rng: random.Random, t: int, chars: int) -> list[dict]:
    tree = f"tree-{t}"

    def message(mid, parent, role, rank=None):
        return {
            "message_id": mid,
            "parent_id": parent,
            "user_id": f"user-{rng.randint(1, 5000)}",
            "created_date": "2023-02-05T14:23:50.983374+00:00",
            "text": f"{mid}: {words(rng, chars if role == 'assistant' else chars // 4)}",
            "role": role,
            "lang": "en",
            "review_count": 3,
            "review_result": True,
            "deleted": False,
            "rank": rank,
            "synthetic": False,
            "model_name": None,
            "detoxify": None,
            "message_tree_id": tree,
            "tree_state": "ready_for_export",
            "emojis": {"name": ["+1"], "count": [2]},
            "labels": {"name": ["spam", "quality"], "value": [0.0, 0.8], "count": [3, 3]},
        }

    rows = [message(tree, None, "prompter")]
    rows += [message(f"{tree}-a{k}", tree, "assistant", k) for k in range(3)]
    rows.append(message(f"{tree}-p0", f"{tree}-a0", "prompter"))
    rows += [message(f"{tree}-b{k}", f"{tree}-p0", "assistant", k) for k in range(3)]
    rows.append(message(f"{tree}-p1", f"{tree}-a1", "prompter"))
    rows += [message(f"{tree}-c{k}", f"{tree}-p1", "assistant", k) for k in range(2)]
    return rows


def write_files(folder: Path, rows: int, messages: int, chars: int) -> dict[str, Path]:
    rng = random.Random(30)
    uf, base, oasst = folder / "ultrafeedback.jsonl", folder / "ultrafeedback-rankings.jsonl", folder / "oasst2.jsonl"
    with uf.open("w") as f, base.open("w") as g:
        for i in range(rows):
            row = ultrafeedback_row(rng, i, chars)
            f.write(json.dumps(row) + "\n")
            g.write(json.dumps(baseline_line(row, i)) + "\n")
    with oasst.open("w") as f:
        written, t = 0, 0
        while written < messages:
            for message in oasst_tree(rng, t, chars)[: messages - written]:
                f.write(json.dumps(message) + "\n")
                written += 1
            t += 1
    return {"ultrafeedback": uf, "jsonl": base, "oasst2": oasst}


# --- one import, in a child process --------------------------------------------------------


def child(kind: str, path: str, url: str) -> None:
    from preflab.db.engine import open_database, session_factory

    sessions = session_factory(open_database(url))
    start, cpu = time.perf_counter(), cpu_seconds()
    if kind == "jsonl":
        from preflab.db.ingest.jsonl import import_file, import_rankings_batch

        summary = import_file(sessions, path, import_rankings_batch)
        rankings, rows, quarantined = summary.imported, summary.read, summary.quarantined
    else:
        from preflab.db.ingest.datasets.job import DatasetImportSettings, import_dataset

        summary = import_dataset(sessions, path, DatasetImportSettings(format=kind))
        rankings, rows, quarantined = summary.rankings, summary.rows, summary.quarantined
    seconds = time.perf_counter() - start
    print(
        json.dumps(
            {
                "kind": kind,
                "seconds": seconds,
                "cpu": cpu_seconds() - cpu,
                "rankings": rankings,
                "rows": rows,
                "quarantined": quarantined,
                "peak_rss_mb": peak_rss_mb(),
            }
        )
    )


def run_child(kind: str, path: Path, database: str, workdir: Path) -> dict:
    drop = None
    if database == "sqlite":
        db = workdir / f"{kind}-{time.monotonic_ns()}.db"
        url = f"sqlite:///{db}"
    else:
        url, drop = postgres_schema_url()
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--child", kind, str(path), url], check=True, capture_output=True, text=True
        )
    finally:
        if drop:
            drop()
        if database == "sqlite":
            for leftover in workdir.glob(f"{kind}-*.db*"):
                leftover.unlink()
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["quarantined"]:
        raise SystemExit(f"{kind} on {database}: {result['quarantined']} rows quarantined, the bench data is wrong")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64000)
    parser.add_argument("--messages", type=int, default=100000)
    parser.add_argument("--response-chars", type=int, default=600)
    parser.add_argument("--database", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--child", nargs=3, metavar=("KIND", "PATH", "URL"))
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    databases = ("sqlite", "postgres") if args.database == "both" else (args.database,)
    kinds = ("ultrafeedback", "oasst2") + (() if args.no_baseline else ("jsonl",))
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        start = time.perf_counter()
        files = write_files(workdir, args.rows, args.messages, args.response_chars)
        sizes = ", ".join(f"{name} {path.stat().st_size / 2**20:.0f} MB" for name, path in files.items())
        print(f"generated in {time.perf_counter() - start:.1f} s: {sizes}")
        runs: dict[tuple[str, str], list[dict]] = {}
        for _ in range(args.repeat):
            for database in databases:
                for kind in kinds:
                    result = run_child(kind, files[kind], database, workdir)
                    runs.setdefault((database, kind), []).append(result)
                    print(
                        f"  {database:8} {kind:13} {result['rankings']:,} rankings in {result['seconds']:.1f} s "
                        f"(cpu {result['cpu']:.1f} s) = {result['rankings'] / result['seconds']:,.0f}/s, "
                        f"peak RSS {result['peak_rss_mb']:.0f} MB, load {os.getloadavg()[0]:.2f}",
                        flush=True,
                    )
    report(runs, databases, kinds)


def report(runs: dict, databases, kinds) -> None:
    median = {key: statistics.median(r["rankings"] / r["seconds"] for r in results) for key, results in runs.items()}
    rss = {key: max(r["peak_rss_mb"] for r in results) for key, results in runs.items()}
    print("\n| import | " + " | ".join(databases) + (" | Postgres ÷ SQLite time |" if len(databases) == 2 else " |"))
    print("|---" * (len(databases) + 1 + (len(databases) == 2)) + "|")
    for kind in kinds:
        cells = [f"{median[d, kind]:,.0f} rankings/s, {rss[d, kind]:.0f} MB" for d in databases]
        ratio = [f"{median['sqlite', kind] / median['postgres', kind]:.2f}×"] if len(databases) == 2 else []
        print(f"| {kind} | " + " | ".join(cells + ratio) + " |")
    if "jsonl" in kinds:
        for d in databases:
            print(
                f"{d}: import dataset ultrafeedback ÷ import rankings (same rankings): "
                f"{median[d, 'ultrafeedback'] / median[d, 'jsonl']:.2f}× the rate"
            )
    print(f"load after: {os.getloadavg()[0]:.2f}")
    print(json.dumps({f"{database} {kind}": results for (database, kind), results in runs.items()}))


if __name__ == "__main__":
    main()
