"""Helpers shared by the benchmarks (run as `python bench/bench_NAME.py`, so this is importable)."""

from __future__ import annotations

import os
import resource
import uuid
from collections.abc import Callable


def sqlite_dataset(workdir, rankings, seed: int):
    """Import a rankings file into a fresh SQLite store in `workdir`, build its pairs and export them.

    Returns (session factory, the exported dataset version, the number of pairs).
    """
    from preflab.db.engine import open_database, session_factory
    from preflab.db.export.dataset import ExportSettings
    from preflab.db.export.job import export_dataset
    from preflab.db.ingest.jsonl import import_file, import_rankings_batch
    from preflab.db.pairs.build import build_pairs

    sessions = session_factory(open_database(f"sqlite:///{workdir / 'bench.db'}"))
    import_file(sessions, rankings, import_rankings_batch)
    with sessions.begin() as session:
        pairs = build_pairs(session).pairs
    with sessions.begin() as session:
        version = export_dataset(session, workdir / "dataset", ExportSettings(test_size=0.2, seed=seed))
    return sessions, version, pairs


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have ended (the export's reader is one)."""
    spent = os.times()
    return spent.user + spent.system + spent.children_user + spent.children_system


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def postgres_schema_url() -> tuple[str, Callable[[], None]]:
    """A fresh schema on the local Postgres server, migrated to head: (URL using it, function dropping it).

    preflab never migrates Postgres when it opens it, so this upgrades the schema
    as `preflab db upgrade` does.
    """
    from sqlalchemy import create_engine, text

    from preflab.db.engine import make_engine, upgrade

    base = os.environ.get("PREFLAB_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))  # a name we generated

    def drop() -> None:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()

    url = f"{base}?options=-csearch_path%3D{schema}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    return url, drop
