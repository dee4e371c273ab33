"""Reading a query as Arrow: through ADBC on Postgres when that sees what the session sees, else the session."""

import pytest
from sqlalchemy import func, select, text

from preflab.db import arrow, export
from preflab.db.export import ExportSettings, comparison_batches, export_dataset
from preflab.db.ingest import import_file, import_rankings_batch
from preflab.db.models import Comparison
from preflab.db.pair_tables import id_schema
from preflab.db.pairs import build_pairs

from .helpers import ranking_line, write_lines

ADBC_READER = arrow._adbc_reader


@pytest.fixture
def store(sessions, tmp_path):
    lines = [ranking_line(f"prompt {i}", [f"answer {i}.{j}" for j in range(4)], [[0], [1, 2], [3]], "ann", id=f"r{i}")
             for i in range(30)]
    lines += [ranking_line("prompt 0", ["answer 0.0", "answer 0.1"], [[1], [0]], "judge", kind="ai", id="j0")]
    import_file(sessions, write_lines(tmp_path / "r.jsonl", lines), import_rankings_batch)
    return sessions


def _read(session, through: str, monkeypatch):
    """The comparisons' id batches (7 rows at most), read through `through` (adbc or the session); and
    which reader `arrow_batches` chose by itself."""
    chose = []

    def spy(*args):
        reader = ADBC_READER(*args)
        chose.append("adbc" if reader is not None else "session")
        return reader if through == "adbc" else None

    monkeypatch.setattr(arrow, "_adbc_reader", spy)
    monkeypatch.setattr(export, "BATCH_ROWS", 7)
    return list(comparison_batches(session, "any")), chose


def test_both_readers_give_the_same_batches(store, monkeypatch):
    with store.begin() as s:
        build_pairs(s)
    with store() as s:
        via_session, _ = _read(s, "session", monkeypatch)
        via_adbc, used = _read(s, "adbc", monkeypatch)
        expected = "adbc" if s.connection().dialect.name == "postgresql" else "session"
        assert used == [expected]  # SQLite never: ADBC would load a second SQLite library into the process
    assert all(b.num_rows <= 7 and b.schema == id_schema() for b in via_session + via_adbc)
    rows = [r for b in via_session for r in b.to_pylist()]
    assert rows == [r for b in via_adbc for r in b.to_pylist()]
    assert len(rows) == 30 * 5 + 1 and {r["annotator_kind"] for r in rows} == {"human", "ai"}


def test_a_transaction_that_wrote_reads_its_own_rows(store, monkeypatch):
    """Pairs built in the export's own transaction, not committed: only its connection sees them."""
    with store.begin() as s:
        build_pairs(s)
        batches, used = _read(s, "adbc", monkeypatch)
        assert used == ["session"]
        assert sum(b.num_rows for b in batches) == s.scalar(select(func.count()).select_from(Comparison)) == 151


def test_an_export_reads_uncommitted_pairs_and_equals_a_committed_export(store, tmp_path):
    with store.begin() as s:
        build_pairs(s)
        first = export_dataset(s, tmp_path / "a", ExportSettings(format="parquet"))
        s.rollback()
    with store.begin() as s:
        build_pairs(s)
    with store.begin() as s:
        second = export_dataset(s, tmp_path / "b", ExportSettings(format="parquet"))
    assert (first.n_train, first.n_test) == (second.n_train, second.n_test)
    assert first.content_hash == second.content_hash
    batches = list(comparison_batches(store(), "human-first"))
    assert sum(b.num_rows for b in batches) == 30 * 5  # the judge's pair is of a prompt people ranked


@pytest.mark.postgres
def test_a_full_build_refreshes_the_planner_statistics(postgres_url, tmp_path):
    """Postgres plans the export's queries from fresh row counts, not those of an empty table."""
    from preflab.db.engine import open_database, session_factory

    sessions = session_factory(open_database(postgres_url))
    lines = [ranking_line(f"p {i}", [f"a {i}.{j}" for j in range(5)], [[0], [1], [2], [3], [4]], "ann", id=f"r{i}")
             for i in range(40)]
    import_file(sessions, write_lines(tmp_path / "r.jsonl", lines), import_rankings_batch)
    with sessions.begin() as s:
        build_pairs(s)
    with sessions() as s:
        estimated = s.scalar(text("SELECT reltuples FROM pg_class WHERE oid = 'comparisons'::regclass"))
    assert estimated == 40 * 10
