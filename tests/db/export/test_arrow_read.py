"""Reading a query as Arrow: through ADBC on Postgres, or a child process on SQLite, when that sees what the
session sees; else through the session."""

import subprocess

import pytest
from sqlalchemy import func, select, text

from preflab.db.export import arrow, sqlite_reader
from preflab.db.export import job as export
from preflab.db.export.dataset import ExportSettings
from preflab.db.export.job import comparison_batches, export_dataset
from preflab.db.export.pair_tables import id_schema
from preflab.db.ingest.jsonl import import_file, import_rankings_batch
from preflab.db.models import Comparison
from preflab.db.pairs.build import build_pairs
from preflab.errors import DatabaseError
from tests.db.helpers import ranking_line, write_lines

ADBC_READER = arrow._adbc_reader
CHILD_REQUEST = arrow._child_request


@pytest.fixture
def store(sessions, tmp_path):
    lines = [
        ranking_line(f"prompt {i}", [f"answer {i}.{j}" for j in range(4)], [[0], [1, 2], [3]], "ann", id=f"r{i}")
        for i in range(30)
    ]
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
    # cut alike, whatever batches ADBC delivers: the dataset's content hash is taken a batch at a time
    assert [b.num_rows for b in via_adbc] == [b.num_rows for b in via_session]
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


@pytest.fixture
def sqlite_store(sqlite_url, tmp_path):
    from preflab.db.engine import open_database, session_factory

    sessions = session_factory(open_database(sqlite_url))
    lines = [
        ranking_line(f"prompt {i}", [f"answer {i}.{j}" for j in range(4)], [[0], [1, 2], [3]], "ann", id=f"r{i}")
        for i in range(30)
    ]
    import_file(sessions, write_lines(tmp_path / "r.jsonl", lines), import_rankings_batch)
    with sessions.begin() as s:
        build_pairs(s)
    return sessions


def _child_spy(monkeypatch) -> list[str]:
    """Big reads from the first row, and which reader each read took."""
    chose = []

    def spy(*args):
        request = CHILD_REQUEST(*args)
        chose.append("child" if request is not None else "session")
        return request

    monkeypatch.setattr(arrow, "_child_request", spy)
    monkeypatch.setattr(arrow, "CHILD_MIN_ROWS", 1)
    monkeypatch.setattr(export, "BATCH_ROWS", 7)
    return chose


def test_a_child_process_reads_the_same_batches_as_the_session(sqlite_store, monkeypatch):
    chose = _child_spy(monkeypatch)
    with sqlite_store() as s:
        via_session = list(comparison_batches(s, "any"))  # no size given: a small read, in this process
        via_child = list(comparison_batches(s, "any", rows_hint=150))
    assert chose == ["child"]
    assert all(b.num_rows <= 7 and b.schema == id_schema() for b in via_child)
    assert [b.num_rows for b in via_child] == [b.num_rows for b in via_session]  # the content hash goes by batch
    assert [r for b in via_child for r in b.to_pylist()] == [r for b in via_session for r in b.to_pylist()]
    assert sum(b.num_rows for b in via_child) == 30 * 5


def test_the_child_reads_the_file_the_session_opened_after_a_change_of_directory(tmp_path, monkeypatch):
    """A relative SQLite URL names a file from the directory the engine was made in, not the current one."""
    from preflab.db.engine import open_database, session_factory

    monkeypatch.chdir(tmp_path)
    sessions = session_factory(open_database("sqlite:///relative.db"))
    lines = [ranking_line(f"p {i}", ["a", "b", "c"], [[0], [1], [2]], "ann", id=f"r{i}") for i in range(4)]
    import_file(sessions, write_lines(tmp_path / "r.jsonl", lines), import_rankings_batch)
    with sessions.begin() as s:
        build_pairs(s)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    chose = _child_spy(monkeypatch)
    with sessions() as s:
        assert sum(b.num_rows for b in comparison_batches(s, "any", rows_hint=12)) == 4 * 3
    assert chose == ["child"] and not (tmp_path / "elsewhere" / "relative.db").exists()


def test_an_export_read_by_a_child_process_equals_one_read_in_process(sqlite_store, tmp_path, monkeypatch):
    chose = _child_spy(monkeypatch)
    with sqlite_store.begin() as s:
        by_child = export_dataset(s, tmp_path / "b", ExportSettings(format="parquet"))
    monkeypatch.setattr(arrow, "CHILD_MIN_ROWS", 10**9)
    with sqlite_store.begin() as s:
        in_process = export_dataset(s, tmp_path / "a", ExportSettings(format="parquet"))
    assert chose == ["child"]  # the second export did not ask: too small
    assert (by_child.n_train, by_child.n_test, by_child.content_hash) == (
        in_process.n_train,
        in_process.n_test,
        in_process.content_hash,
    )


def test_a_sqlite_transaction_that_wrote_reads_in_process(sqlite_store, monkeypatch):
    """The child would not see this transaction's uncommitted pairs: the session reads them."""
    chose = _child_spy(monkeypatch)
    with sqlite_store.begin() as s:
        s.execute(text("DELETE FROM comparisons WHERE id % 2 = 0"))
        batches = list(comparison_batches(s, "any", rows_hint=150))
        s.rollback()
    assert chose == ["session"] and sum(b.num_rows for b in batches) == 75


def test_a_failing_child_raises_one_sentence(sqlite_url):
    from preflab.db.engine import open_database

    open_database(sqlite_url)
    path = sqlite_url.removeprefix("sqlite:///")
    with pytest.raises(DatabaseError, match=r"^reading .* in a child process failed: no such table: nowhere$"):
        list(sqlite_reader.child_batches(path, "SELECT id FROM nowhere", [], id_schema(), 10))


def test_a_reader_stopped_early_stops_its_child(sqlite_store, monkeypatch):
    started = []
    popen = subprocess.Popen

    def spy(*args, **kwargs):
        started.append(popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(sqlite_reader.subprocess, "Popen", spy)
    _child_spy(monkeypatch)
    monkeypatch.setattr(export, "BATCH_ROWS", 1)  # 150 batches: more than the pipe holds, so the child waits
    with sqlite_store() as s:
        batches = comparison_batches(s, "any", rows_hint=150)
        assert next(batches).num_rows == 1
        batches.close()
    assert len(started) == 1 and started[0].returncode < 0  # killed, not finished


@pytest.mark.postgres
def test_a_full_build_refreshes_the_planner_statistics(postgres_url, tmp_path):
    """Postgres plans the export's queries from fresh row counts, not those of an empty table."""
    from preflab.db.engine import open_database, session_factory

    sessions = session_factory(open_database(postgres_url))
    lines = [
        ranking_line(f"p {i}", [f"a {i}.{j}" for j in range(5)], [[0], [1], [2], [3], [4]], "ann", id=f"r{i}")
        for i in range(40)
    ]
    import_file(sessions, write_lines(tmp_path / "r.jsonl", lines), import_rankings_batch)
    with sessions.begin() as s:
        build_pairs(s)
    with sessions() as s:
        estimated = s.scalar(text("SELECT reltuples FROM pg_class WHERE oid = 'comparisons'::regclass"))
    assert estimated == 40 * 10
