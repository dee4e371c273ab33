"""bench_store.py's printed report: the peer's line, each database's stages, and the bulk implementations compared."""

from __future__ import annotations

import statistics


def whole_path(fast: dict) -> float:
    return sum(fast[s]["seconds"] for s in ("import", "pairs", "export"))


def median_run(runs: list[dict]) -> dict:
    """The run whose whole path is the median (the lower middle one of an even count)."""
    ordered = sorted(runs, key=whole_path)
    return ordered[(len(ordered) - 1) // 2]


def print_peer(result: dict) -> None:
    print(
        f"peer (DuckDB {result['duckdb']}, one query: read_json, self-join, COPY to Parquet): "
        f"{result['pairs']:,} pairs in {result['seconds']:.2f} s ({result['cpu_seconds']:.2f} s CPU), "
        f"peak RSS {result['peak_rss_mb']:.0f} MB"
    )


def print_report(database: str, fast: dict, base: dict | None, peer_result: dict) -> None:
    imp_rate = fast["import"]["rankings"] / fast["import"]["seconds"]
    pair_rate = fast["pairs"]["pairs"] / fast["pairs"]["seconds"]
    export_rate = fast["export"]["pairs"] / fast["export"]["seconds"]
    total = whole_path(fast)
    total_cpu = sum(fast[s]["cpu_seconds"] for s in ("import", "pairs", "export"))
    if base:
        base_imp_rate = base["import"]["rankings"] / base["import"]["seconds"]
        base_pair_rate = base["pairs"]["pairs"] / base["pairs"]["seconds"]
        vs_import = (
            f" (baseline {base_imp_rate:,.0f}/s on {base['import']['rankings']:,}; {imp_rate / base_imp_rate:.1f}x)"
        )
        vs_pairs = f" (baseline {base_pair_rate:,.0f}/s; {pair_rate / base_pair_rate:.1f}x)"
    else:
        vs_import = vs_pairs = ""
    print(f"\n== {database} (bulk: {fast['bulk']}) ==")
    cpu = {stage: f" ({fast[stage]['cpu_seconds']:.1f} s CPU)" for stage in ("import", "pairs", "export")}
    print(
        f"import : {fast['import']['rankings']:,} rankings in {fast['import']['seconds']:.1f} s{cpu['import']} = "
        f"{imp_rate:,.0f} rankings/s{vs_import} peak RSS {fast['import']['peak_rss_mb']:.0f} MB"
    )
    print(
        f"pairs  : {fast['pairs']['pairs']:,} pairs in {fast['pairs']['seconds']:.1f} s{cpu['pairs']} = "
        f"{pair_rate:,.0f} pairs/s{vs_pairs} peak RSS {fast['pairs']['peak_rss_mb']:.0f} MB"
    )
    print(
        f"export : {fast['export']['pairs']:,} pairs in {fast['export']['seconds']:.1f} s{cpu['export']} = "
        f"{export_rate:,.0f} pairs/s, peak RSS {fast['export']['peak_rss_mb']:.0f} MB"
    )
    print(
        f"total  : {total:.1f} s for the whole path ({total_cpu:.1f} s CPU) = {total / peer_result['seconds']:.1f}x "
        f"the peer's {peer_result['seconds']:.2f} s (load average {fast['load_before']:.1f} before, "
        f"{fast['load_after']:.1f} after)"
    )
    if "more" in fast:
        more = fast["more"]
        inc, full = more["incremental"], more["full"]
        print(
            f"more   : {more['rankings']:,} rankings imported in {more['import_seconds']:.2f} s; pairs rebuilt "
            f"incrementally in {inc['seconds']:.2f} s ({inc['cpu_seconds']:.2f} s CPU; {inc['changed']:,} rankings "
            f"changed), in full in {full['seconds']:.2f} s ({full['cpu_seconds']:.2f} s CPU): "
            f"{inc['pairs']:,} pairs both ways; peak RSS {more['peak_rss_mb']:.0f} MB"
        )


def print_bulk_comparison(runs: dict, sides: list[str]) -> None:
    """Median seconds per stage and inside the bulk functions, per implementation; ratio = first / second."""
    first, second = sides[:2]

    def median(side: str, stage: str, op: str | None = None, key: str = "seconds") -> float:
        return statistics.median(r[stage]["in_bulk"][op][key] if op else r[stage][key] for r in runs[side])

    loads = [r[k] for side in sides for r in runs[side] for k in ("load_before", "load_after")]
    print(
        f"bulk, {first} vs {second} (median of {len(runs[first])} each; ratio = {first} / {second}, "
        f"> 1: {second} faster; load average {min(loads):.1f}–{max(loads):.1f})"
    )
    for stage in ("import", "pairs", "export"):
        a, b = median(first, stage), median(second, stage)
        print(f"  {stage:<6} stage: {first} {a:6.2f} s, {second} {b:6.2f} s, ratio {a / b:.2f}")
        for op in ("insert_rows", "lookup"):
            done = runs[first][0][stage]["in_bulk"][op]
            if not done["calls"]:
                continue
            a, b = median(first, stage, op), median(second, stage, op)
            ca, cb = median(first, stage, op, "cpu_seconds"), median(second, stage, op, "cpu_seconds")
            unit = "rows" if op == "insert_rows" else "values"
            print(
                f"    {op:<11}: {first} {a:6.2f} s, {second} {b:6.2f} s, ratio {a / b:.2f}; "
                f"CPU {ca:.2f} s vs {cb:.2f} s, ratio {ca / cb:.2f} "
                f"({done['rows']:,} {unit} in {done['calls']:,} calls)"
            )
