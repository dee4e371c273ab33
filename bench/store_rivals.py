"""What bench_store.py measures preflab's path against: DuckDB's one-shot peer query and the row-by-row baseline."""

from __future__ import annotations

import json
import time
from pathlib import Path

from common import peak_rss_mb

PEER_QUERY = """
COPY (
  WITH r AS (SELECT row_number() OVER () AS rid, prompt, responses, ranking
             FROM read_json(?, format = 'newline_delimited',
                            columns = {prompt: 'VARCHAR', responses: 'VARCHAR[]', ranking: 'INTEGER[][]'})),
  tiers AS (SELECT rid, unnest(ranking) AS tier, generate_subscripts(ranking, 1) AS pos FROM r),
  items AS (SELECT rid, pos, unnest(tier) AS idx FROM tiers)
  SELECT r.prompt, r.responses[a.idx + 1] AS chosen, r.responses[b.idx + 1] AS rejected,
         (b.pos - a.pos)::DOUBLE AS margin
  FROM items a JOIN items b ON a.rid = b.rid AND a.pos < b.pos JOIN r ON r.rid = a.rid
) TO '{out}' (FORMAT parquet)
"""


def peer(path: Path, out: Path) -> dict:
    """The one-shot DuckDB query a user might write instead: JSONL in, every tier pair out as Parquet."""
    import duckdb

    t, cpu = time.perf_counter(), time.process_time()
    con = duckdb.connect()
    con.execute(PEER_QUERY.replace("{out}", str(out)), [str(path)])  # our own temporary path
    seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
    pairs = con.execute("SELECT count(*) FROM read_parquet(?)", [str(out)]).fetchone()[0]
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "pairs": pairs,
        "peak_rss_mb": peak_rss_mb(),
        "duckdb": duckdb.__version__,
    }


def baseline(url: str, path: Path, limit: int) -> dict:
    """Row-by-row ORM: a SELECT per prompt/candidate/annotator, an INSERT per row, a Python pair loop."""
    from sqlalchemy import delete, select

    from preflab.db.engine import open_database, session_factory
    from preflab.db.models import (
        Annotator,
        Candidate,
        Comparison,
        PairBuild,
        Prompt,
        Ranking,
        RankingItem,
        RawRecord,
    )
    from preflab.db.store import content_hash, new_pseudonym, payload_hash

    sessions = session_factory(open_database(url))
    t = time.perf_counter()
    n = 0
    with sessions.begin() as s, path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if n >= limit:
                break
            s.add(RawRecord(source="baseline", locator=str(number), payload=line, payload_hash=payload_hash(line)))
            rec = json.loads(line)
            h = content_hash(rec["prompt"])
            prompt = s.scalar(select(Prompt).where(Prompt.content_hash == h))
            if prompt is None:
                prompt = Prompt(text=rec["prompt"], content_hash=h)
                s.add(prompt)
                s.flush()
            annotator = s.scalar(select(Annotator).where(Annotator.name == rec["annotator"]))
            if annotator is None:
                annotator = Annotator(kind="human", name=rec["annotator"], pseudonym=new_pseudonym("human"))
                s.add(annotator)
                s.flush()
            ids = []
            for text in rec["responses"]:
                ch = content_hash(text)
                cand = s.scalar(select(Candidate).where(Candidate.prompt_id == prompt.id, Candidate.content_hash == ch))
                if cand is None:
                    cand = Candidate(prompt_id=prompt.id, text=text, content_hash=ch)
                    s.add(cand)
                    s.flush()
                ids.append(cand.id)
            ranking = Ranking(
                prompt_id=prompt.id,
                annotator_id=annotator.id,
                source="baseline",
                external_id=rec["id"],
                n_tiers=len(rec["ranking"]),
            )
            s.add(ranking)
            s.flush()
            tier_of = {i: t for t, tier in enumerate(rec["ranking"]) for i in tier}
            for pos, cid in enumerate(ids):
                s.add(RankingItem(ranking_id=ranking.id, candidate_id=cid, tier=tier_of.get(pos), shown_position=pos))
            n += 1
    import_seconds = time.perf_counter() - t
    t = time.perf_counter()
    pairs = 0
    with sessions.begin() as s:
        s.execute(delete(Comparison))
        build = PairBuild(strategy="all", aggregate="none", annotator_kind="any")
        s.add(build)
        s.flush()
        for ranking in s.scalars(select(Ranking).where(Ranking.source == "baseline")):
            items = [i for i in ranking.items if i.tier is not None]
            for a in items:
                for b in items:
                    if a.tier < b.tier:
                        s.add(
                            Comparison(
                                build_id=build.id,
                                prompt_id=ranking.prompt_id,
                                chosen_id=a.candidate_id,
                                rejected_id=b.candidate_id,
                                ranking_id=ranking.id,
                                annotator_kind="human",
                                margin=float(b.tier - a.tier),
                                weight=1.0,
                            )
                        )
                        pairs += 1
    return {
        "import": {"seconds": import_seconds, "rankings": n},
        "pairs": {"seconds": time.perf_counter() - t, "pairs": pairs},
    }
