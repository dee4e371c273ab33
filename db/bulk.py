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

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from operator import itemgetter
from typing import Any

import orjson
from sqlalchemy import JSON, DateTime, Enum, Integer, String, Table, any_, bindparam, cast, func, insert, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

IN_CHUNK = 500  # values per lookup statement (SQLite took longer with 5,000: bench/README.md)


def insert_rows(
    session: Session, table: Table, rows: Sequence[dict[str, Any]], conflict: Sequence[str] | None = None
) -> None:
    """INSERT many rows (all with the same keys); with `conflict`, skip rows that collide on those columns."""
    if not rows:
        return
    if conflict is None:
        stmt = insert(table)
    else:
        dialect = sqlite if session.connection().dialect.name == "sqlite" else postgresql
        stmt = dialect.insert(table).on_conflict_do_nothing(index_elements=list(conflict))
    session.execute(stmt, list(rows))


def append_rows(
    session: Session,
    table: Table,
    rows: Sequence[dict[str, Any]] | Sequence[tuple],
    *,
    columns: Sequence[str] | None = None,
    new_ids: bool = True,
    skip: Sequence[str] | None = None,
) -> list[int] | None:
    """INSERT rows (all with the same keys) that take new ids, fast; returns the ids, in order.

    For writers whose transaction is run again when another writer adds the same
    row first (`preflab.db.transactions.in_transaction`): a row that collides with a
    unique key fails the whole statement. Rows go to the driver as plain tuples,
    with the columns' Python-side defaults filled once per call (one timestamp for
    the batch). Postgres: ids drawn from the table's sequence in one query, rows
    sent by COPY. SQLite: one executemany; the transaction then holds the write
    lock, so the rows took the consecutive ids that end at max(id).

    Args:
        rows: dicts with the same keys, or tuples of the values of `columns`.
        new_ids: False for a table without an `id` column (returns []).
        skip: SQLite only: the columns of a unique key; a row colliding on it is skipped, not an error
            (ON CONFLICT DO NOTHING). The ids come back when no row was skipped, else None: look them up.
    """
    if not rows:
        return []
    dialect = session.connection().dialect
    if skip is not None and dialect.name != "sqlite":
        raise ValueError("append_rows skips colliding rows on SQLite only")
    given = list(columns or rows[0])
    defaults = {}  # the Python-side defaults of the columns not given: a value, or a function called once
    for column in table.c:
        if (
            column.name not in given
            and column.default is not None
            and (column.default.is_scalar or column.default.is_callable)
        ):
            arg = column.default.arg
            defaults[column.name] = arg(None) if column.default.is_callable else arg
    if columns:
        values = rows
    else:
        values = [itemgetter(*given)(row) for row in rows] if len(given) > 1 else [(row[given[0]],) for row in rows]
    steps = [(i, f) for i, f in enumerate(_processor(table.c[name], dialect) for name in given) if f]
    if steps:
        values = [list(v) for v in values]
        for v in values:
            for i, f in steps:
                if v[i] is not None:
                    v[i] = f(v[i])
    constants = tuple(_converted(table.c[name], dialect, value) for name, value in defaults.items())
    columns = [*given, *defaults]
    if dialect.name == "postgresql":
        ids = _draw_ids(session, table, len(rows)) if new_ids else []
        _copy(
            session,
            table,
            (["id"] if new_ids else []) + columns,
            [(i, *v, *constants) for i, v in zip(ids, values)] if new_ids else [(*v, *constants) for v in values],
        )
        return list(ids)
    statement = insert(table) if skip is None else sqlite.insert(table).on_conflict_do_nothing(index_elements=skip)
    statement = statement.values({c: bindparam(c) for c in columns}).compile(dialect=dialect)
    order = itemgetter(*(columns.index(name) for name in statement.positiontup))  # the table's column order
    # The compiled text, executed as is: SQLAlchemy passes the tuples to the driver untouched.
    done = session.connection().exec_driver_sql(str(statement), [order((*v, *constants)) for v in values])
    if skip is not None and done.rowcount != len(rows):
        return None
    if not new_ids:
        return []
    last = session.scalar(select(func.max(table.c.id)))
    return list(range(last - len(rows) + 1, last + 1))


def _draw_ids(session: Session, table: Table, n: int) -> list[int]:
    """n new ids from the Postgres sequence of `table.id`, in one query.

    The sequence is named once, as its oid: `nextval(pg_get_serial_sequence(...))`
    looked the name up for every id drawn (100 ms for 13,000 ids against 16 ms).
    """
    sequence = session.scalar(
        select(cast(cast(func.pg_get_serial_sequence(table.name, "id"), postgresql.REGCLASS), postgresql.OID))
    )
    draw = func.nextval(cast(bindparam("sequence", sequence, type_=postgresql.OID), postgresql.REGCLASS))
    return list(session.scalars(select(draw).select_from(func.generate_series(1, n))).all())


def _processor(column, dialect):
    """How a value of `column` goes to the driver, where the driver cannot take the Python value itself."""
    if isinstance(column.type, JSON) and dialect.name in ("sqlite", "postgresql"):
        return _json_text
    if isinstance(column.type, (JSON, DateTime)):
        return column.type.dialect_impl(dialect).bind_processor(dialect)
    return None


def _json_text(value: Any) -> str:
    """A JSON column's value as the text stored: orjson's, 5–10x faster than the standard library's.

    SQLAlchemy's JSON type writes `json.dumps(value)`; the stored text differs only in spelling (non-ASCII
    characters as themselves, not `\\u` escapes), which both databases read back as the same value, but for
    a float NaN or infinity: null, where the standard library wrote `NaN`, which is not JSON (Postgres refused
    it). What orjson refuses (an integer past 64 bits) goes the standard library's way.
    """
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return json.dumps(value)


def _converted(column, dialect, value):
    convert = _processor(column, dialect)
    return convert(value) if convert and value is not None else value


# Column types (oids) psycopg writes in binary form, with the Python types it writes them from (None is NULL).
# Any other column or value, and the COPY is text.
_BINARY = {
    16: {bool},
    17: {bytes},
    20: {int, bool},
    21: {int, bool},
    23: {int, bool},
    25: {str},
    1043: {str},
    114: {str},
    701: {float, int},
    1184: {datetime},
}
_SENT_AS = {114: 25}  # json's binary form is its text: written as text's
# Integers a binary COPY writes exactly: an integer column's range (past it psycopg writes the low bits), and
# in a double precision column those a double holds (past 2**1024 psycopg raises where the server refused).
_INT_RANGE = {21: (-(2**15), 2**15 - 1), 23: (-(2**31), 2**31 - 1), 20: (-(2**63), 2**63 - 1), 701: (-(2**53), 2**53)}
_COLUMN_OIDS = text(
    "SELECT attname, atttypid FROM pg_attribute "
    "WHERE attrelid = CAST(quote_ident(:table) AS regclass) AND attnum > 0 AND NOT attisdropped"
)


def _copy(session: Session, table: Table, columns: list[str], rows: list[Sequence]) -> None:
    """COPY rows into `table`; a driver error is raised as SQLAlchemy's (so a unique-key race is retried).

    In binary form where psycopg writes every column from the values given: the server then reads each value
    by its length instead of scanning the text for tabs, newlines and escapes (UltraFeedback's raw payloads,
    468 MB: 3.9 s of the server's CPU as text, 2.7 s binary; bench/README.md, issue 30).
    """
    import psycopg
    from psycopg import sql

    oids = _binary_oids(dict(session.execute(_COLUMN_OIDS, {"table": table.name}).all()), columns, rows)
    statement = sql.SQL("COPY {} ({}) FROM STDIN{}").format(
        sql.Identifier(table.name),
        sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.SQL(" (FORMAT BINARY)" if oids else ""),
    )
    try:
        with session.connection().connection.dbapi_connection.cursor() as cursor, cursor.copy(statement) as copy:
            if oids:
                copy.set_types(oids)
            for row in rows:
                copy.write_row(row)
    except psycopg.Error as exc:
        raise DBAPIError.instance(f"COPY {table.name}", None, exc, psycopg.Error) from exc


def _binary_oids(types: dict[str, int], columns: list[str], rows: list[Sequence]) -> list[int] | None:
    """The types to declare for a binary COPY of `rows`, or None where one column or value has no binary writer.

    A binary COPY writes each value by its column's type, not by its own, and checks less than the server's
    text input: a text column given a number, a timestamp without a time zone (which the server reads in the
    session's zone) and an integer out of its column's range (written cut to its low bits) go as text, where
    the server converts or refuses them as it always did.
    """
    oids = []
    for i, name in enumerate(columns):
        oid = types.get(name)
        writes = _BINARY.get(oid)
        given = set(map(type, map(itemgetter(i), rows))) - {type(None)}
        if writes is None or not given <= writes:
            return None
        if ((oid in _INT_RANGE and int in given) or datetime in given) and not _fits(oid, map(itemgetter(i), rows)):
            return None
        oids.append(_SENT_AS.get(oid, oid))
    return oids


def _fits(oid: int, values: Iterable) -> bool:
    """Integers within `_INT_RANGE`; timestamps with a time zone."""
    if oid in _INT_RANGE:
        low, high = _INT_RANGE[oid]
        numbers = [v for v in values if type(v) is int]
        return not numbers or (low <= min(numbers) and max(numbers) <= high)
    return all(v.tzinfo is not None for v in values if v is not None)


def lookup(session: Session, table: Table, columns: Sequence[str], key: str, values: Iterable) -> list[tuple]:
    """Rows of `table`'s `columns` whose `key` column is in `values`, IN_CHUNK values at a time.

    Where every column is an integer or a string, which the drivers hand back as
    SQLAlchemy would, the rows come from the driver's own cursor: SQLAlchemy's rows
    around them took about a third of the time of reading an export's texts
    (bench/README.md, issue 15). Objects pending in the session are flushed first,
    as `session.execute` would.
    """
    values = list(dict.fromkeys(values))
    if not values:
        return []
    connection = session.connection()
    dialect = connection.dialect
    stmt = select(*(table.c[c] for c in columns)).where(_is_in(table.c[key], dialect.name))
    out: list[tuple] = []
    chunks = (values[start : start + IN_CHUNK] for start in range(0, len(values), IN_CHUNK))
    if not all(_plain(table.c[c].type) for c in columns):
        for chunk in chunks:
            # .all() fetches the chunk's rows at once; iterating the result would fetch them one by one.
            out.extend(map(tuple, session.execute(stmt, {"values": chunk}).all()))
        return out
    if session.autoflush:
        session.flush()
    sql = str(stmt.compile(dialect=dialect))
    # The one parameter, bound as `_is_in` declares it: a JSON list on SQLite, an array on Postgres.
    bind = (lambda chunk: (json.dumps(chunk),)) if dialect.name == "sqlite" else (lambda chunk: {"values": chunk})
    cursor = connection.connection.dbapi_connection.cursor()
    try:
        for chunk in chunks:
            cursor.execute(sql, bind(chunk))
            out.extend(cursor.fetchall())
    except dialect.loaded_dbapi.Error as exc:  # raised as SQLAlchemy's, as `session.execute` would
        raise DBAPIError.instance(sql, None, exc, dialect.loaded_dbapi.Error) from exc
    finally:
        cursor.close()
    return out


def _plain(column_type) -> bool:
    """An integer or a string: a value both drivers return as SQLAlchemy would (an Enum converts)."""
    return isinstance(column_type, (Integer, String)) and not isinstance(column_type, Enum)


def in_values(session: Session, column, *, semi_join: bool = False):
    """A WHERE clause: `column` is one of the values `for_values` binds, a chunk at a time.

    `semi_join`: on Postgres, `column IN (SELECT unnest(...))` instead of
    `column = ANY(...)`. The planner then probes an index on `column` per value,
    even when the table has no statistics yet. `ls sync` finds earlier versions
    of annotations this way: the index leads with the project, and on a table
    grown from empty in the same sync `= ANY` of 500 values filtered every row of
    the project (93 ms a lookup). Not the default: for candidates by prompt, the
    semi-join was the slow one (8.5 s of a 100,000-ranking import against
    about 2; bench/README.md, issue 15).
    """
    return _is_in(column, session.connection().dialect.name, semi_join)


def for_values(session: Session, statement, values: Iterable) -> int:
    """Run an UPDATE or DELETE whose WHERE holds `in_values`, IN_CHUNK values at a time; rows affected."""
    values = list(dict.fromkeys(values))
    return sum(
        session.execute(statement, {"values": values[start : start + IN_CHUNK]}).rowcount
        for start in range(0, len(values), IN_CHUNK)
    )


def refresh_statistics(session: Session, table: Table) -> None:
    """Have Postgres sample `table` again after a bulk write changed much of it (SQLite: nothing).

    Autovacuum analyzes a table only some time after a bulk write; until then the
    planner believes it is as small as it was. An export right after the first
    pairs build then chose a nested loop over 1.9 M pairs: 84 s for one query,
    2 s once analyzed (bench/README.md, issue 15).
    """
    dialect = session.connection().dialect
    if dialect.name == "postgresql":
        # The name comes from preflab's own table metadata, quoted by the dialect.
        session.execute(text(f"ANALYZE {dialect.identifier_preparer.format_table(table)}"))


def _is_in(column, dialect_name: str, semi_join: bool = False):
    """`column` is one of the list bound to "values", passed as one parameter.

    `column.in_(values)` renders a placeholder per value on every execution and
    the driver parses that long statement again each time; with one parameter the
    statement stays short and the same (measured in bench/README.md: 1.3x less CPU
    than `IN` on SQLite, 3x less time on Postgres).
    """
    if dialect_name == "postgresql":
        values = bindparam("values", type_=postgresql.ARRAY(column.type))
        if semi_join:
            return column.in_(select(func.unnest(values).table_valued("value").render_derived().c.value))
        return column == any_(values)
    values = func.json_each(bindparam("values", type_=JSON)).table_valued("value")  # SQLite's JSON1, built in
    return column.in_(select(values.c.value))
