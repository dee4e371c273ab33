"""`preflab import dataset` on public-dataset-shaped files: rankings/s, Postgres ÷ SQLite, peak RSS.

Usage: python bench/bench_import_datasets.py [--rows 64000] [--messages 100000] [--response-chars 600]
                                             [--database sqlite|postgres|both] [--no-baseline] [--repeat 1]
                                             [--baseline-code DIR] [--kinds KIND,…]

Two files are generated (seeded): an UltraFeedback-shaped JSON Lines file (`--rows` rows, 4 completions
each, with the dataset's annotations) and an oasst2-shaped one (`--messages` message rows, in trees of 11:
a prompt, 3 ranked replies, two follow-ups with 3 and 2 ranked replies, so 3 rankings a tree). Each is
imported by `import_dataset` into a fresh store, in a child process whose peak RSS (`ru_maxrss`) is read:
UltraFeedback twice, by every criterion (`ultrafeedback`: overall and the four aspects, five rankings a
row) and by `--criterion overall` alone (`ultrafeedback-overall`, one a row). The baseline, in the same
run: the overall rankings written as preflab's own JSON Lines (prompt, responses, tiers, models, scores)
and imported through `import rankings` (`import_file`); `ultrafeedback-overall`'s rate is given as a
multiple of it. With `--repeat N` each database runs every import N times, interleaved, and the median
is reported.

`--baseline-code DIR` compares this code with another checkout's (`git worktree add /tmp/base HEAD`): every
import runs under both, interleaved (this code, then DIR's), the other's `preflab` put first on PYTHONPATH
(`code_tree`). DIR's UltraFeedback import is its default, whatever it ranks by (before criteria: one ranking
a row, by overall_score); the report gives this code's rate as a multiple of DIR's for each import.
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


# What each import reads, and the import settings it runs with (under another checkout: `BASELINE_SETTINGS`).
FILES = {"ultrafeedback": "ultrafeedback", "ultrafeedback-overall": "ultrafeedback", "oasst2": "oasst2"}
SETTINGS = {
    "ultrafeedback": {"format": "ultrafeedback"},
    "ultrafeedback-overall": {"format": "ultrafeedback", "criterion": "overall"},
    "oasst2": {"format": "oasst2"},
}
# A checkout from before criteria has no --criterion: its UltraFeedback import ranks by overall_score alone.
BASELINE_SETTINGS = {**SETTINGS, "ultrafeedback-overall": {"format": "ultrafeedback"}}


def child(kind: str, path: str, url: str, settings: str) -> None:
    """One import in a fresh store (`url` "postgres": a fresh schema, migrated by the code this child runs)."""
    import preflab
    from preflab.db.engine import open_database, session_factory

    drop = None
    if url == "postgres":
        url, drop = postgres_schema_url()
    try:
        sessions = session_factory(open_database(url))
        start, cpu = time.perf_counter(), cpu_seconds()
        if kind == "jsonl":
            from preflab.db.ingest.jsonl import import_file, import_rankings_batch

            summary = import_file(sessions, path, import_rankings_batch)
            rankings, rows, quarantined = summary.imported, summary.read, summary.quarantined
        else:
            from preflab.db.ingest.datasets.job import DatasetImportSettings, import_dataset

            summary = import_dataset(sessions, path, DatasetImportSettings(**json.loads(settings)))
            rankings, rows, quarantined = summary.rankings, summary.rows, summary.quarantined
        seconds = time.perf_counter() - start
    finally:
        if drop:
            drop()
    print(
        json.dumps(
            {
                "kind": kind,
                "code": str(Path(preflab.__file__).resolve().parent.parent),
                "seconds": seconds,
                "cpu": cpu_seconds() - cpu,
                "rankings": rankings,
                "rows": rows,
                "quarantined": quarantined,
                "peak_rss_mb": peak_rss_mb(),
            }
        )
    )


def code_tree(checkout: Path, into: Path) -> Path:
    """A folder holding `checkout`'s `preflab` package, to put first on PYTHONPATH.

    The package is laid out by pyproject's package-dir (`preflab.db` is the checkout's `db/`, …): a folder
    `preflab` of links to the checkout's `preflab/` entries and to each mapped folder. The editable install's
    finder comes after PYTHONPATH's entries, so a child with this first imports the checkout's code.
    """
    import tomllib

    mapping = tomllib.loads((checkout / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    package = into / "preflab"
    package.mkdir(parents=True)
    for entry in (checkout / mapping["preflab"]).iterdir():
        (package / entry.name).symlink_to(entry)
    for name, folder in mapping.items():
        if name != "preflab":
            (package / name.removeprefix("preflab.")).symlink_to(checkout / folder)
    return into


def run_child(kind: str, path: Path, database: str, workdir: Path, code: Path | None = None) -> dict:
    """One import in a child process; `code`: a `code_tree` whose checkout it runs (None: this one)."""
    url = f"sqlite:///{workdir / f'{kind}-{time.monotonic_ns()}.db'}" if database == "sqlite" else "postgres"
    settings = json.dumps((SETTINGS if code is None else BASELINE_SETTINGS).get(kind, {}))
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(code), env.get("PYTHONPATH"))))
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--child", kind, str(path), url, settings],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        )
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"{kind} on {database} failed:\n{exc.stderr[-3000:]}") from None
    finally:
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
    parser.add_argument("--baseline-code", type=Path, metavar="DIR", help="another checkout to compare with")
    parser.add_argument("--kinds", help="only these imports, comma-separated (ultrafeedback-overall,oasst2)")
    parser.add_argument("--child", nargs=4, metavar=("KIND", "PATH", "URL", "SETTINGS"))
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    databases = ("sqlite", "postgres") if args.database == "both" else (args.database,)
    kinds = ("ultrafeedback", "ultrafeedback-overall", "oasst2") + (() if args.no_baseline else ("jsonl",))
    if args.kinds:
        kinds = tuple(k for k in kinds if k in args.kinds.split(","))
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        codes = {"this": None}
        if args.baseline_code:
            codes["base"] = code_tree(args.baseline_code.resolve(), workdir / "base-code")
        start = time.perf_counter()
        files = write_files(workdir, args.rows, args.messages, args.response_chars)
        sizes = ", ".join(f"{name} {path.stat().st_size / 2**20:.0f} MB" for name, path in files.items())
        print(f"generated in {time.perf_counter() - start:.1f} s: {sizes}")
        runs: dict[tuple[str, str, str], list[dict]] = {}
        for _ in range(args.repeat):
            for database in databases:
                for kind in kinds:
                    for name, code in codes.items():
                        result = run_child(kind, files[FILES.get(kind, kind)], database, workdir, code)
                        runs.setdefault((name, database, kind), []).append(result)
                        print(
                            f"  {name:4} {database:8} {kind:21} {result['rankings']:,} rankings in "
                            f"{result['seconds']:.1f} s (cpu {result['cpu']:.1f} s) = "
                            f"{result['rankings'] / result['seconds']:,.0f}/s, "
                            f"peak RSS {result['peak_rss_mb']:.0f} MB, load {os.getloadavg()[0]:.2f}",
                            flush=True,
                        )
    report(runs, databases, kinds, list(codes))


def report(runs: dict, databases, kinds, codes) -> None:
    median = {key: statistics.median(r["rankings"] / r["seconds"] for r in results) for key, results in runs.items()}
    per_cpu = {key: statistics.median(r["rankings"] / r["cpu"] for r in results) for key, results in runs.items()}
    rss = {key: max(r["peak_rss_mb"] for r in results) for key, results in runs.items()}
    for code in codes:
        print(f"\n{code} code ({runs[code, databases[0], kinds[0]][0]['code']}):")
        print("| import | " + " | ".join(databases) + (" | Postgres ÷ SQLite time |" if len(databases) == 2 else " |"))
        print("|---" * (len(databases) + 1 + (len(databases) == 2)) + "|")
        for kind in kinds:
            cells = [f"{median[code, d, kind]:,.0f} rankings/s, {rss[code, d, kind]:.0f} MB" for d in databases]
            ratio = (
                [f"{median[code, 'sqlite', kind] / median[code, 'postgres', kind]:.2f}×"] if len(databases) == 2 else []
            )
            print(f"| {kind} | " + " | ".join(cells + ratio) + " |")
        if "jsonl" in kinds:
            for d in databases:
                print(
                    f"{d}: import dataset ultrafeedback-overall ÷ import rankings (same rankings): "
                    f"{median[code, d, 'ultrafeedback-overall'] / median[code, d, 'jsonl']:.2f}× the rate"
                )
    if "base" in codes:
        print("\nthis code's rankings/s ÷ the baseline's (medians; the baseline's ultrafeedback-overall: its default):")
        for d in databases:
            print(f"  {d}: " + ", ".join(f"{k} {median['this', d, k] / median['base', d, k]:.3f}×" for k in kinds))
        # on a loaded machine wall time drifts; this process's CPU does less (a Postgres server's is not in it)
        print("the same, per CPU second of the importing process:")
        for d in databases:
            print(f"  {d}: " + ", ".join(f"{k} {per_cpu['this', d, k] / per_cpu['base', d, k]:.3f}×" for k in kinds))
    print(f"load after: {os.getloadavg()[0]:.2f}")
    print(json.dumps({" ".join(key): results for key, results in runs.items()}))


if __name__ == "__main__":
    main()
