"""`preflab leaderboard` at Chatbot Arena's size: 1 M battles of 50 models, 1,000 bootstrap rounds.

Usage: python bench/bench_leaderboard.py [--battles 1000000] [--models 50] [--rounds 1000]
                                         [--only arrays,store,style,fastchat] [--fastchat-rounds 100]

Each case runs in a fresh process, so its peak RSS is its own (goal: ≤ 30 s and ≤ 1 GB):
- arrays: `board.rate` on battles in memory (the fit, the bootstrap, the counts, the
  pairwise tables), then the bootstrap alone, with every sample's fit started from the
  full data's solution (warm) and from zero (cold: the warm start's baseline), best of 3;
- store: `board.leaderboard` on a SQLite store holding the battles as two-way
  rankings, each of its own two replies as in Chatbot Arena (2 M candidates, 1,000
  prompts), reading them included; the store is written first, by plain INSERTs, and
  not timed;
- style: `--style-control` on a tenth of the battles with a tenth of the rounds
  (style control fits battle by battle, one sample at a time);
- fastchat: the baseline in the same run, FastChat's `compute_bt` and
  `compute_bootstrap_bt` as written out in bench/fastchat_bt.py
  (L-BFGS per sample), on the same battles, `--fastchat-rounds` rounds in one process
  (FastChat spreads them over a process pool), scaled to `--rounds`.
Prints one line per case and a JSON document of all of them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import peak_rss_mb


def simulated(args):
    import numpy as np
    from worlds import simulate

    from preflab.db.leaderboard.battles import Battles

    rng = np.random.default_rng(0)
    strengths = np.sort(rng.normal(0, 100, args.models))  # a spread of ±300 Elo leaves room for the ties
    a, b, outcome, _ = simulate(strengths, args.battles, rng, tie_rates=(0.05, 0.1))
    return Battles([f"model-{k:02d}" for k in range(args.models)], a, b, outcome, np.arange(args.battles))


def case_arrays(args) -> dict:
    import numpy as np

    from preflab.db.leaderboard.board import LeaderboardConfig, rate
    from preflab.db.leaderboard.bootstrap import Cells, bootstrap_ratings
    from preflab.db.leaderboard.fit import fit_pairs

    battles = simulated(args)
    start = time.perf_counter()
    board = rate(battles, LeaderboardConfig(bootstrap=args.rounds, pairwise=True))
    seconds = time.perf_counter() - start
    rss = peak_rss_mb()
    cells = Cells(battles)
    r = fit_pairs(cells.pairs, *cells.pair_totals(np.bincount(cells.cell_of_battle).astype(float)))
    timed, samples, held = {"warm": [], "cold": []}, {}, None
    for _ in range(3):  # alternated, best of three: this machine is shared
        for name, begin in (("warm", r), ("cold", np.zeros_like(r))):
            start = time.perf_counter()
            samples[name], held = bootstrap_ratings(battles, args.rounds, 0, begin, cells=cells)
            timed[name].append(time.perf_counter() - start)
    timed = {name: min(times) for name, times in timed.items()}
    return {
        "seconds": seconds,
        "peak_rss_mb": rss,
        "bootstrap_warm_s": timed["warm"],
        "bootstrap_cold_s": timed["cold"],
        # Where a sample holds the model: one it does not hold is left free there, whatever the start.
        "warm_vs_cold_max_elo": float(400 * np.abs(samples["warm"] - samples["cold"])[held].max()),
        "top": board.ratings[0].model,
        "widest_interval": max(
            (x.upper - x.lower for x in board.ratings if x.upper is not None and x.lower is not None), default=None
        ),
    }


def write_store(path: Path, args) -> float:
    """A SQLite store whose rankings are the simulated battles, each a two-way ranking; returns seconds taken."""
    import sqlite3

    import numpy as np

    from preflab.db.engine import dispose_all, open_database

    start = time.perf_counter()
    open_database(f"sqlite:///{path}")
    dispose_all()
    battles = simulated(args)
    prompts, now = 1000, "2025-01-01 00:00:00.000000"
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, prompts, len(battles))
    con = sqlite3.connect(path)
    with con:
        con.executemany(
            "INSERT INTO prompts (id, text, content_hash, created_at) VALUES (?, ?, ?, ?)",
            ((p + 1, f"prompt {p}", f"{p:064d}", now) for p in range(prompts)),
        )
        # Each battle its own two replies, as in Chatbot Arena: the read joins 2 M candidates.
        con.executemany(
            "INSERT INTO candidates (id, prompt_id, text, content_hash, model, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            (
                (
                    2 * k + side + 1,
                    int(prompt[k]) + 1,
                    f"reply {side} of battle {k}",
                    f"{k:063d}{side}",
                    battles.models[int(m[k])],
                    now,
                )
                for k in range(len(battles))
                for side, m in ((0, battles.a), (1, battles.b))
            ),
        )
        con.execute(
            "INSERT INTO annotators (id, kind, name, pseudonym, created_at) VALUES (1, 'human', 'ana', "
            "'annotator-1', ?)",
            (now,),
        )
        con.executemany(
            "INSERT INTO rankings (id, prompt_id, annotator_id, source, external_id, version, status, "
            "n_tiers, same_as_shown, created_at, updated_at) "
            "VALUES (?, ?, 1, 'import', ?, 1, 'valid', 2, 0, ?, ?)",
            ((k + 1, int(prompt[k]) + 1, str(k), now, now) for k in range(len(battles))),
        )
        tier_a = np.where(battles.outcome == 0.0, 1, 0)
        tier_b = np.where(battles.outcome == 1.0, 1, 0)

        def items():
            for k in range(len(battles)):
                yield k + 1, 2 * k + 1, int(tier_a[k]), 0
                yield k + 1, 2 * k + 2, int(tier_b[k]), 1

        con.executemany(
            "INSERT INTO ranking_items (ranking_id, candidate_id, tier, shown_position) VALUES (?, ?, ?, ?)", items()
        )
    con.close()
    return time.perf_counter() - start


def case_store(args) -> dict:
    from preflab.db.engine import open_sessions
    from preflab.db.leaderboard.battles import Filters, read_battles
    from preflab.db.leaderboard.board import LeaderboardConfig, leaderboard

    sessions = open_sessions(f"sqlite:///{args.store}", existing=True)
    start = time.perf_counter()
    with sessions.begin() as session:
        board = leaderboard(session, LeaderboardConfig(bootstrap=args.rounds))
    seconds = time.perf_counter() - start
    rss = peak_rss_mb()
    start = time.perf_counter()
    with sessions.begin() as session:
        read = len(read_battles(session, Filters()))
    return {
        "seconds": seconds,
        "peak_rss_mb": rss,
        "read_battles_s": time.perf_counter() - start,
        "battles": board.battles,
        "read": read,
    }


def case_style(args) -> dict:
    import numpy as np

    from preflab.db.leaderboard.board import LeaderboardConfig, rate

    args.battles //= 10
    battles = simulated(args)
    rng = np.random.default_rng(2)
    style = rng.integers(0, 40, (len(battles), 2, 4)).astype(float)
    start = time.perf_counter()
    rate(battles, LeaderboardConfig(bootstrap=args.rounds // 10, style_control=True), style)
    return {
        "seconds": time.perf_counter() - start,
        "peak_rss_mb": peak_rss_mb(),
        "battles": len(battles),
        "rounds": args.rounds // 10,
    }


def case_fastchat(args) -> dict:
    import fastchat_bt as fastchat
    import pandas as pd
    from worlds import winners

    battles = simulated(args)
    names = pd.Series(battles.models)
    df = pd.DataFrame(
        {"model_a": names[battles.a].values, "model_b": names[battles.b].values, "winner": winners(battles.outcome)}
    )
    start = time.perf_counter()
    fastchat.compute_bt(df)
    fastchat.compute_bootstrap_bt(df, args.fastchat_rounds)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "peak_rss_mb": peak_rss_mb(),
        "rounds": args.fastchat_rounds,
        "seconds_scaled_to_rounds": seconds * args.rounds / args.fastchat_rounds,
    }


CASES = {"arrays": case_arrays, "store": case_store, "style": case_style, "fastchat": case_fastchat}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--battles", type=int, default=1_000_000)
    parser.add_argument("--models", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--fastchat-rounds", type=int, default=100)
    parser.add_argument("--only", default=",".join(CASES))
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(CASES[args.case](args)))
        return
    results = {}
    common = [
        "--battles",
        str(args.battles),
        "--models",
        str(args.models),
        "--rounds",
        str(args.rounds),
        "--fastchat-rounds",
        str(args.fastchat_rounds),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "bench.db"
        for name in args.only.split(","):
            extra = []
            if name == "store":
                results["store_written_s"] = write_store(store, args)
                extra = ["--store", str(store)]
            out = subprocess.run(
                [sys.executable, __file__, "--case", name, *common, *extra], capture_output=True, text=True, check=True
            ).stdout
            results[name] = json.loads(out.strip().splitlines()[-1])
            print(
                f"{name}: {results[name]['seconds']:.2f} s, peak RSS {results[name]['peak_rss_mb']:.0f} MB "
                f"{ {k: v for k, v in results[name].items() if k not in ('seconds', 'peak_rss_mb')} }",
                flush=True,
            )
    print(json.dumps({"battles": args.battles, "models": args.models, "rounds": args.rounds, **results}, indent=2))


if __name__ == "__main__":
    main()
