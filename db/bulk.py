"""Bulk inserts and lookups through SQLAlchemy Core, a batch per statement.

`insert_rows` is one Core executemany: SQLAlchemy fills the Python-side column
defaults (timestamps, statuses) and runs each value through its type (JSON,
SQLite datetimes), then hands all rows to the driver's `executemany` at once.
`lookup` reads rows by a key column, IN_CHUNK values per statement, bound as
one parameter (a Postgres array, a JSON list that SQLite's `json_each` unpacks).

This replaced a driver-level path (statements compiled once, then
`Connection.exec_driver_sql` with SQLAlchemy's private bind processors): measured
in bench/bench_store.py it was never 1.5x faster than this (bench/README.md,
"db/bulk.py: Core executemany vs driver-level executemany"); the benchmark keeps
it as its baseline.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import JSON, Table, any_, bindparam, func, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

IN_CHUNK = 500  # values per lookup statement (SQLite took longer with 5,000: bench/README.md)


def insert_rows(session: Session, table: Table, rows: Sequence[dict[str, Any]],
                conflict: Sequence[str] | None = None) -> None:
    """INSERT many rows (all with the same keys); with `conflict`, skip rows that collide on those columns."""
    if not rows:
        return
    if conflict is None:
        stmt = insert(table)
    else:
        dialect = sqlite if session.connection().dialect.name == "sqlite" else postgresql
        stmt = dialect.insert(table).on_conflict_do_nothing(index_elements=list(conflict))
    session.execute(stmt, list(rows))


def lookup(session: Session, table: Table, columns: Sequence[str], key: str, values: Iterable) -> list[tuple]:
    """Rows of `table`'s `columns` whose `key` column is in `values`, IN_CHUNK values at a time."""
    values = list(dict.fromkeys(values))
    if not values:
        return []
    stmt = select(*(table.c[c] for c in columns)).where(_is_in(table.c[key], session.connection().dialect.name))
    out: list[tuple] = []
    for start in range(0, len(values), IN_CHUNK):
        # .all() fetches the chunk's rows at once; iterating the result would fetch them one by one.
        out.extend(map(tuple, session.execute(stmt, {"values": values[start:start + IN_CHUNK]}).all()))
    return out


def _is_in(column, dialect_name: str):
    """`column` is one of the list bound to "values", passed as one parameter.

    `column.in_(values)` renders a placeholder per value on every execution and
    the driver parses that long statement again each time; with one parameter the
    statement stays short and the same (measured in bench/README.md: 1.3x less CPU
    than `IN` on SQLite, 3x less time on Postgres).
    """
    if dialect_name == "postgresql":
        return column == any_(bindparam("values", type_=postgresql.ARRAY(column.type)))
    values = func.json_each(bindparam("values", type_=JSON)).table_valued("value")  # SQLite's JSON1, built in
    return column.in_(select(values.c.value))
