"""preflab.db.bulk's former driver-level path: the baseline bench_store.py measures bulk.py against.

Each statement is built by SQLAlchemy and compiled once per shape and dialect,
then handed to the driver's `executemany` (or cursor) through
`Connection.exec_driver_sql`; Python-side column defaults are filled in here and
each value goes through its type's bind processor (JSON, SQLite datetimes)
through SQLAlchemy's private `TypeEngine._cached_bind_processor` (SQLAlchemy 2.0
and 2.1). bench/README.md has the measurements that retired it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from operator import itemgetter
from typing import Any

from sqlalchemy import Table, bindparam, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from preflab.db.bulk import IN_CHUNK


def _defaults(table: Table, columns: Sequence[str]) -> dict[str, Any]:
    """Values for the Python-side defaults of `table` that the rows do not carry."""
    out = {}
    for column in table.columns:
        if column.name in columns or (column.primary_key and column.autoincrement):
            continue
        default = column.default
        if default is None:
            continue
        out[column.name] = default.arg(None) if default.is_callable else default.arg
    return out


@lru_cache(maxsize=256)
def _insert_sql(table: Table, columns: tuple[str, ...], dialect, conflict: tuple[str, ...] | None):
    values = {c: bindparam(c) for c in columns}
    if conflict is None:
        stmt = insert(table).values(values)
    else:
        dialect_insert = sqlite.insert if dialect.name == "sqlite" else postgresql.insert
        stmt = dialect_insert(table).values(values).on_conflict_do_nothing(index_elements=list(conflict))
    compiled = stmt.compile(dialect=dialect)
    return str(compiled), compiled.positiontup if compiled.positional else None


def driver_insert_rows(
    session: Session, table: Table, rows: Sequence[dict[str, Any]], conflict: Sequence[str] | None = None
) -> None:
    """bulk.insert_rows as it was: compiled once, the driver's executemany, SQLAlchemy's private bind processors."""
    if not rows:
        return
    conn = session.connection()
    extra = _defaults(table, tuple(rows[0]))
    columns = tuple(rows[0]) + tuple(extra)
    sql, order = _insert_sql(table, columns, conn.dialect, tuple(conflict) if conflict is not None else None)
    if extra:
        rows = [{**row, **extra} for row in rows]
    processors = {c: p for c in columns if (p := table.c[c].type._cached_bind_processor(conn.dialect))}
    if processors:
        rows = [{**row, **{c: p(row[c]) for c, p in processors.items()}} for row in rows]
    if order is not None:
        getter = itemgetter(*order)
        params = [getter(row) if len(order) > 1 else (getter(row),) for row in rows]
    else:
        params = list(rows)
    conn.exec_driver_sql(sql, params)


@lru_cache(maxsize=256)
def _lookup_sql(table: Table, columns: tuple[str, ...], key: str, dialect, size: int):
    stmt = select(*(table.c[c] for c in columns)).where(table.c[key].in_([bindparam(f"v{i}") for i in range(size)]))
    compiled = stmt.compile(dialect=dialect)
    return str(compiled), compiled.positiontup if compiled.positional else None


def driver_lookup(session: Session, table: Table, columns: Sequence[str], key: str, values: Iterable) -> list[tuple]:
    """bulk.lookup as it was: one compiled IN of 500 placeholders (padded), the driver's cursor."""
    values = list(dict.fromkeys(values))
    if not values:
        return []
    conn = session.connection()
    out: list[tuple] = []
    for start in range(0, len(values), IN_CHUNK):
        part = values[start : start + IN_CHUNK]
        size = IN_CHUNK if len(values) > IN_CHUNK else len(part)
        part = part + [part[-1]] * (size - len(part))  # pad: one compiled shape per size
        sql, order = _lookup_sql(table, tuple(columns), key, conn.dialect, size)
        params = dict(zip((f"v{i}" for i in range(size)), part))
        if order is not None:
            params = tuple(params[name] for name in order)
        out.extend(map(tuple, conn.exec_driver_sql(sql, params).fetchall()))
    return out
