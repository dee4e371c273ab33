"""A SELECT's rows as Arrow record batches, without a Python object per value where possible.

The export reads millions of id rows. Fetched through the driver, each value
becomes a Python object and is then copied into Arrow. On Postgres, ADBC (Arrow's
database driver, over binary COPY) hands the rows over as Arrow arrays instead;
on SQLite, a big read is done by a child process (`preflab.db.export.sqlite_reader`),
on another core, and comes back as Arrow. Either way the next batch is read in a
thread while the caller works on the last one.

Both read on a second connection, which sees what is committed. So they are used
only while the session's transaction has written nothing: then the second
connection sees the same rows a statement in the session would (each statement
of a transaction at READ COMMITTED sees the latest commit, as does each read of a
SQLite connection before its first write). Otherwise, and for small reads on
SQLite, the rows come through the session's own connection, a batch at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

from sqlalchemy import Select, func, select
from sqlalchemy.dialects.postgresql import psycopg
from sqlalchemy.orm import Session

from preflab.db.export.sqlite_reader import child_batches, rows_to_batch
from preflab.db.overlap import read_ahead

__all__ = ["CHILD_MIN_ROWS", "arrow_batches", "rows_to_batch"]

# A SQLite read of fewer rows stays in this process: starting the child (Python and pyarrow) took
# 0.5 s on a busy 2-core machine (bench/README.md, issue 15).
CHILD_MIN_ROWS = 200_000


def arrow_batches(session: Session, query: Select, schema, batch_rows: int, rows_hint: int = 0) -> Iterator:
    """Yield the rows of `query` as `pyarrow.RecordBatch`es of at most `batch_rows` rows, cast to `schema`.

    `schema` names the query's columns in order; every batch has exactly its types.
    `rows_hint`: about how many rows the query returns (on SQLite, a child process
    reads them from CHILD_MIN_ROWS on).
    """
    reader = _adbc_reader(session, query, batch_rows)
    if reader is not None:
        with reader as batches:
            yield from read_ahead(_cut(batches, schema, batch_rows))
        return
    child = _child_request(session, query) if rows_hint >= CHILD_MIN_ROWS else None
    if child is not None:
        yield from read_ahead(child_batches(*child, schema, batch_rows))
        return
    yield from _driver_batches(session, query, schema, batch_rows)


def _cut(batches: Iterator, schema, batch_rows: int) -> Iterator:
    """`batches` of any sizes as batches of exactly `batch_rows` rows (the last one fewer), cast to `schema`.

    Every reader cuts the rows alike: an export's content hash is taken a batch at a time.
    """
    import pyarrow as pa

    held: list = []
    rows = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        held.append(batch)
        rows += batch.num_rows
        if rows >= batch_rows:
            table = pa.Table.from_batches(held)
            whole = rows - rows % batch_rows
            for start in range(0, whole, batch_rows):
                yield _cast(table.slice(start, batch_rows).columns, schema)
            held = [b for b in table.slice(whole).to_batches() if b.num_rows]
            rows -= whole
    if held:
        yield _cast(pa.Table.from_batches(held).columns, schema)


def _cast(columns: Sequence, schema):
    import pyarrow as pa

    columns = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
    return pa.RecordBatch.from_arrays([c.cast(f.type) for c, f in zip(columns, schema)], schema=schema)


def _driver_batches(session: Session, query: Select, schema, batch_rows: int) -> Iterator:
    """Through the session's own connection: the driver's rows, a batch at a time, into Arrow."""
    connection = session.connection()
    if connection.dialect.name == "sqlite":
        # The driver's own cursor steps through the rows as they are fetched; SQLAlchemy's
        # rows around them cost a third more (bench/README.md, issue 15).
        cursor = connection.connection.dbapi_connection.cursor()
        try:
            cursor.execute(*_sqlite_statement(connection, query))
            for rows in iter(lambda: cursor.fetchmany(batch_rows), []):
                yield rows_to_batch(rows, schema)
        finally:
            cursor.close()
        return
    # Postgres: a server-side cursor, so the rows come a batch at a time.
    for rows in connection.execute(query.execution_options(yield_per=batch_rows)).partitions(batch_rows):
        yield rows_to_batch(rows, schema)


def _child_request(session: Session, query: Select) -> tuple[str, str, list] | None:
    """(file, SQL, parameters) for a child process to read `query` with, when it sees what the session sees."""
    if session.autoflush:
        session.flush()  # pending objects are written, as a query in the session would (then it has written)
    connection = session.connection()
    if connection.dialect.name != "sqlite":
        return None
    if connection.connection.dbapi_connection.in_transaction:
        return None  # this transaction has written: only its own connection sees that
    # The file the connection opened, by its absolute path ("" for a database in memory).
    files = {name: file for _, name, file in connection.exec_driver_sql("PRAGMA database_list")}
    if not files.get("main"):
        return None
    sql, params = _sqlite_statement(connection, query)
    try:
        json.dumps(params)
    except TypeError:
        return None  # a parameter the request cannot carry
    return files["main"], sql, params


def _sqlite_statement(connection, query: Select) -> tuple[str, list]:
    """`query` as SQLite's driver takes it: the SQL text and its positional parameters."""
    compiled = query.compile(dialect=connection.dialect)
    return str(compiled), [compiled.params[name] for name in compiled.positiontup or ()]


class _Reader:
    """An ADBC connection and its cursor's batches; both are closed on exit."""

    def __init__(self, connection, sql: str, options: dict[str, str]):
        self.connection, self.sql, self.options = connection, sql, options

    def __enter__(self) -> Iterator:
        self.cursor = self.connection.cursor()
        self.cursor.adbc_statement.set_options(**self.options)
        self.cursor.execute(self.sql)
        return iter(self.cursor.fetch_record_batch())

    def __exit__(self, *exc) -> None:
        self.cursor.close()
        self.connection.close()


def _adbc_reader(session: Session, query: Select, batch_rows: int) -> _Reader | None:
    """An ADBC reader of `query` when its connection sees what the session sees; else None."""
    connection = session.connection()
    if connection.dialect.name != "postgresql":
        # Not SQLite: ADBC's driver links its own copy of the SQLite library, and two copies
        # in one process break each other's file locks (sqlite.org/howtocorrupt.html, 2.2.1).
        return None
    if session.scalar(select(func.txid_current_if_assigned())) is not None:
        return None  # this transaction has written: only its own connection sees that
    import adbc_driver_postgresql.dbapi as adbc

    libpq_url = connection.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    # ADBC streams by COPY only a statement without parameters (with them it holds the whole
    # result in memory: 600 MB for 1.9 M pairs), so the values are rendered into it, quoted by
    # SQLAlchemy's literal processors for their types.
    compiled = query.compile(dialect=psycopg.dialect(), compile_kwargs={"literal_binds": True})
    return _Reader(
        adbc.connect(libpq_url), str(compiled), {"adbc.postgresql.batch_size_hint_bytes": str(64 * batch_rows)}
    )  # ~batch_rows id rows
