"""How close can a SQLite store get to the one-shot DuckDB peer? preflab, its storage floor and the peer, one run.

Usage: python bench/bench_store_floor.py [--rankings 100000]

Issue 15 asks for preflab's SQLite whole path (import + pairs + export) within
8x of a one-shot DuckDB query over the same file (`bench_store.py`'s peer). This
measures what part of that gap is preflab's own code and what part is the
storing the design asks for, on the same file in the same run:

- the peer: `bench_store.py`'s DuckDB query, in a fresh process;
- preflab: `bench_store.py`'s fast path (import, pairs build, Parquet export),
  in a fresh process, on a fresh SQLite file;
- the floor: the rows preflab stored, already built, written to a fresh store
  with preflab's schema by plain `executemany`, a transaction per import batch
  (no parsing, hashing, lookups or Python row building); then preflab's own
  pairs build (one `INSERT ... SELECT`); then the export's reads done inside
  SQLite (the pairs joined to their texts, nothing handed to Python); then
  pyarrow writing the peer's own pairs as Parquet. Each step leaves out work
  preflab cannot skip, so the floor is a lower bound on any implementation of
  this schema on SQLite.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from bench_store import child, write_rankings
from sqlalchemy import bindparam, create_engine, insert, select, text
from store_report import whole_path

from preflab.db.ingest.jsonl import BATCH_LINES

# Copied parents first, so the foreign keys that remain hold at every step.
TABLES = ("raw_records", "prompts", "candidates", "annotators", "rankings", "ranking_items")

# Everything an export reads, read by SQLite alone: each pair's ids and weights and its three texts.
EXPORT_READ = text("""
SELECT count(*), sum(length(p.text) + length(ch.text) + length(rj.text) + c.margin + c.weight
                     + length(c.annotator_kind) + ifnull(r.annotator_id, 0))
FROM comparisons c
LEFT OUTER JOIN rankings r ON r.id = c.ranking_id
JOIN prompts p ON p.id = c.prompt_id
JOIN candidates ch ON ch.id = c.chosen_id
JOIN candidates rj ON rj.id = c.rejected_id
""")


def timed(work) -> tuple[float, object]:
    t = time.perf_counter()
    result = work()
    return time.perf_counter() - t, result


def floor(source: Path, target: Path, peer_parquet: Path, batches: int) -> dict[str, float]:
    """The storage floor: copy `source`'s rows into a fresh store at `target`, build pairs, read, write Parquet."""
    import pyarrow.parquet as pq

    from preflab.db.engine import dispose_all, open_database, session_factory
    from preflab.db.models import Base
    from preflab.db.pairs.build import build_pairs

    engine = open_database(f"sqlite:///{target}")  # preflab's schema and connection settings
    tables = [Base.metadata.tables[name] for name in TABLES]
    with create_engine(f"sqlite:///{source}").connect() as db:  # read before anything is timed
        rows = {table: [tuple(row) for row in db.execute(select(table))] for table in tables}
    spent = dict.fromkeys([f"insert {table.name}" for table in tables] + ["commits"], 0.0)
    connection = engine.raw_connection()
    try:
        # The table's columns in order, as `?` placeholders: what `bulk.append_rows` hands the driver.
        statements = {
            table: str(
                insert(table).values({c.name: bindparam(c.name) for c in table.c}).compile(dialect=engine.dialect)
            )
            for table in tables
        }
        for part in range(batches):  # as the import: a transaction per batch, each table's share of it
            cursor = connection.cursor()
            for table, values in rows.items():
                share = values[len(values) * part // batches : len(values) * (part + 1) // batches]
                spent[f"insert {table.name}"] += timed(lambda: cursor.executemany(statements[table], share))[0]  # noqa: B023 (called within this iteration)
            spent["commits"] += timed(connection.commit)[0]
    finally:
        connection.close()
    rows.clear()
    spent["import"] = sum(spent.values())
    sessions = session_factory(engine)

    def pairs() -> int:
        with sessions.begin() as session:
            return build_pairs(session).pairs

    spent["pairs"], spent["n_pairs"] = timed(pairs)
    with engine.connect() as db:
        spent["export read"] = timed(lambda: db.execute(EXPORT_READ).all())[0]
    table = pq.read_table(peer_parquet)  # the same pairs, as the peer wrote them
    spent["export write"] = timed(lambda: pq.write_table(table, target.with_suffix(".parquet")))[0]
    spent["export"] = spent["export read"] + spent["export write"]
    dispose_all()
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rankings", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="preflab-bench-") as tmp:
        tmp = Path(tmp)
        path = tmp / "rankings.jsonl"
        write_rankings(path, args.rankings)
        print(f"{args.rankings:,} rankings ({path.stat().st_size / 1e6:.0f} MB); load average {os.getloadavg()[0]:.1f}")
        peer = child("none", "peer", tmp / "peer", path, 0)
        fast = child("sqlite", "core", tmp / "preflab", path, 0)
        low = floor(
            tmp / "preflab" / "core.db",
            tmp / "floor.db",
            tmp / "peer" / "pairs.parquet",
            batches=-(-args.rankings // BATCH_LINES),
        )
        load = os.getloadavg()[0]
    if low["n_pairs"] != peer["pairs"] or fast["pairs"]["pairs"] != peer["pairs"]:
        raise SystemExit(
            f"pair counts differ: preflab {fast['pairs']['pairs']:,}, floor {low['n_pairs']:,}, peer {peer['pairs']:,}"
        )
    print(f"peer: DuckDB {peer['duckdb']}, one query: {peer['seconds']:.2f} s, {peer['pairs']:,} pairs")
    print(f"{'':10} {'preflab':>9} {'floor':>9}")
    for stage in ("import", "pairs", "export"):
        print(f"{stage:10} {fast[stage]['seconds']:8.2f}s {low[stage]:8.2f}s")
    preflab_total = whole_path(fast)
    floor_total = low["import"] + low["pairs"] + low["export"]
    print(f"{'whole':10} {preflab_total:8.2f}s {floor_total:8.2f}s")
    print(f"÷ peer     {preflab_total / peer['seconds']:8.1f}x {floor_total / peer['seconds']:8.1f}x   (goal ≤ 8x)")
    print(f"preflab ÷ floor: {preflab_total / floor_total:.2f}x")
    print(
        "floor, by step: "
        + ", ".join(f"{k} {v:.2f} s" for k, v in low.items() if k.startswith(("insert", "commits", "export ")))
    )
    print(f"load average now {load:.1f}")
    print(json.dumps({"rankings": args.rankings, "peer": peer, "preflab": fast, "floor": low}))


if __name__ == "__main__":
    main()
