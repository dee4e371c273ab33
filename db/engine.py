"""Engines, sessions and migrations.

`open_database(url)` is what every command uses: it creates the SQLite file's
directory and turns foreign keys on for every SQLite connection. A SQLite file is
local and has one user, so it is created and migrated on first use by a command
that writes; a command that only reads (`existing=True`) stops instead, so that a
typo in a path does not look like an empty project. Any other
database (a team's Postgres) is never migrated behind its users' backs: it must
already be at the newest revision, and `preflab db upgrade` is the one way there.
A URL preflab cannot use is refused here, in one sentence that never shows a password.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError, ProgrammingError
from sqlalchemy.exc import DatabaseError as DriverDatabaseError
from sqlalchemy.orm import Session, sessionmaker

from preflab.errors import DatabaseError

MIGRATIONS = Path(__file__).with_name("migrations")
DRIVERS = ("sqlite", "sqlite+pysqlite", "postgresql", "postgresql+psycopg", "postgresql+psycopg2")
EXPECTED = "sqlite:///PATH or postgresql://USER@HOST/DATABASE"
SORTER_THREADS = min(os.cpu_count() or 1, 4)


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    # Helper threads for SQLite's sorter: the pairs build's ORDER BY and the export's GROUP BY
    # each sort about 1.9 M rows at 100,000 rankings (a fifth less time on 2 cores: bench/README.md).
    cursor.execute(f"PRAGMA threads={SORTER_THREADS}")
    cursor.close()


# Set on a connection's `info` by `overlap.defer_checkpoint`: the automatic checkpoints it had, given back at check-in.
AUTOCHECKPOINT_KEY = "preflab_wal_autocheckpoint"


def _restore_autocheckpoint(dbapi_connection, record) -> None:
    every = record.info.pop(AUTOCHECKPOINT_KEY, None)
    if every is not None and dbapi_connection is not None:
        dbapi_connection.execute(f"PRAGMA wal_autocheckpoint={int(every)}")


def masked(url: str) -> str:
    """A URL string as a user may see it, password hidden, even where it cannot be parsed."""
    return re.sub(r"(//[^/@]*?:)[^/@]*@", r"\1***@", url)


def _parse(url: str):
    """The URL parsed, `postgres://` read as `postgresql://` (libpq's and most hosts' spelling)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise DatabaseError(f"{masked(url)!r} is not a database URL: expected {EXPECTED}") from None
    if parsed.drivername.split("+")[0] == "postgres":
        parsed = parsed.set(drivername="postgresql" + parsed.drivername[len("postgres") :])
    return parsed


def _require_file(url: str) -> None:
    """Stop, naming the path, when a SQLite URL names a file that does not exist."""
    parsed = _parse(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return
    path = Path(parsed.database).expanduser()
    if not path.is_file():
        raise DatabaseError(
            f"there is no preflab database at {path.absolute()}: check --database-url or "
            f"PREFLAB_DATABASE_URL (commands that write, such as `preflab import`, create it)"
        )


def make_engine(url: str) -> Engine:
    """An engine for a SQLite or Postgres URL (the SQLite file's folder is created).

    Raises:
        DatabaseError: the URL is malformed, names another database, or the SQLite folder cannot be made.
    """
    parsed = _parse(url)
    shown = parsed.render_as_string(hide_password=True)
    if parsed.drivername not in DRIVERS:
        raise DatabaseError(
            f"preflab stores its data in SQLite or PostgreSQL, and cannot use {shown}: expected {EXPECTED}"
        )
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            folder = Path(parsed.database).expanduser().parent
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise DatabaseError(
                    f"cannot create the SQLite database {parsed.database}: "
                    f"{exc.strerror or exc} ({exc.filename or folder})"
                ) from None
        engine = create_engine(parsed, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "checkin", _restore_autocheckpoint)
        return engine
    if parsed.drivername == "postgresql":  # prefer psycopg 3, which we depend on
        parsed = parsed.set(drivername="postgresql+psycopg")
    # psycopg warns through logging when it closes a pipeline on a connection the server
    # dropped; with no logging set up Python prints that on stderr, under a command whose
    # retry has already recovered. An application that sets up logging still gets it.
    logging.getLogger("psycopg").addHandler(logging.NullHandler())
    try:
        return create_engine(parsed, pool_pre_ping=True)
    except (NoSuchModuleError, ImportError) as exc:
        raise DatabaseError(f"cannot use {shown}: its driver is not installed ({exc})") from None


def alembic_config(engine: Engine):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine
    return cfg


def shown_url(engine: Engine) -> str:
    """The engine's URL as a user may see it: never with the password, nor the driver preflab picked."""
    return engine.url.set(drivername=engine.url.get_backend_name()).render_as_string(hide_password=True)


@contextmanager
def _reachable(engine: Engine) -> Iterator[None]:
    """Turn "cannot connect" and "cannot read" driver errors into one DatabaseError sentence."""
    try:
        yield
    except (OperationalError, ProgrammingError, DriverDatabaseError) as exc:
        reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
        raise DatabaseError(f"cannot open the database at {shown_url(engine)}: {reason}") from None


def upgrade(engine: Engine, revision: str = "head") -> list[str]:
    """Run the migrations up to `revision` on `engine`.

    Returns:
        What the migrations say of the data they changed, a line each (0013: the duplicate rankings it retired).

    Raises:
        DatabaseError: the database is unreachable, or a newer preflab migrated it.
    """
    from alembic import command

    config = alembic_config(engine)
    config.attributes["notes"] = []
    with _reachable(engine), _migrating(engine):
        _check_known(engine, current_revision(engine))
        command.upgrade(config, revision)
    return config.attributes["notes"]


MIGRATION_LOCK = 0x70726566  # Postgres advisory lock key: "pref"


@contextmanager
def _migrating(engine: Engine) -> Iterator[None]:
    """Hold a lock that other processes migrating the same database wait on.

    Two commands opening a fresh SQLite file at once would otherwise both create
    the tables (SQLite runs DDL outside the migration's transaction) and one fail.
    The lock is a file beside the database, never the database itself: closing any
    descriptor of a SQLite file drops the locks SQLite holds on it, and corrupts it.
    The holder removes the file before it lets go, so none is left in the user's folder;
    a waiter that then wakes on the removed file opens a new one and waits again.
    """
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK})
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK})
        return
    database = engine.url.database
    if not database or database == ":memory:":
        yield
        return
    import fcntl

    lock = Path(f"{Path(database).expanduser()}.migrate-lock")
    while True:
        with open(lock, "ab") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                held = os.stat(lock).st_ino == os.fstat(handle.fileno()).st_ino
            except FileNotFoundError:  # the holder before us removed it: lock a new one
                held = False
            if not held:
                continue
            try:
                yield
            finally:
                lock.unlink(missing_ok=True)  # still locked: a waiter sees it gone and starts over
            return


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (None for a database with no preflab schema)."""
    from alembic.runtime.migration import MigrationContext

    with _reachable(engine), engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS)).get_current_head()


def _check_known(engine: Engine, revision: str | None) -> None:
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    if revision is None:
        return
    try:
        ScriptDirectory(str(MIGRATIONS)).get_revision(revision)
    except CommandError:  # alembic's "Can't locate revision": a migration this preflab lacks
        raise DatabaseError(
            f"the database at {shown_url(engine)} is at revision {revision}, which a newer "
            f"preflab made (this one knows up to {head_revision()}): upgrade preflab"
        ) from None


def _ensure_schema(engine: Engine) -> None:
    """Migrate a SQLite file to head; require any other database to be at head already."""
    current, head = current_revision(engine), head_revision()
    if current == head:
        return
    _check_known(engine, current)
    if engine.dialect.name == "sqlite":
        for note in upgrade(engine):  # migrated on first use: what a migration changed is said on stderr
            logging.getLogger(__name__).warning(note)
        return
    if current is None:
        raise DatabaseError(f'the database at {shown_url(engine)} has no preflab schema yet: run "preflab db upgrade"')
    raise DatabaseError(
        f"the database at {shown_url(engine)} is at revision {current}; this preflab needs "
        f'{head}: run "preflab db upgrade"'
    )


_opened_engines: list[Engine] = []


@cache
def _opened(url: str, ensure_schema: bool) -> Engine:
    engine = make_engine(url)
    try:
        if ensure_schema:
            _ensure_schema(engine)
    except DatabaseError:
        engine.dispose()
        raise
    _opened_engines.append(engine)
    return engine


def open_database(url: str, ensure_schema: bool = True, *, existing: bool = False) -> Engine:
    """An engine for `url` whose schema is at the newest revision (checked once per process).

    A SQLite file is created and migrated on first use; any other database must
    already be migrated (`preflab db upgrade`). With `ensure_schema=False` the
    engine comes as it is, for `db upgrade` and `db current`. With `existing=True`
    a SQLite file that does not exist is an error, not a new empty store.

    Raises:
        DatabaseError: unreachable, missing (`existing`), not migrated (not SQLite), or
            migrated by a newer preflab.
    """
    if existing:
        _require_file(url)
    return _opened(url, ensure_schema)


def upgrade_database(url: str, revision: str = "head") -> tuple[str | None, list[str]]:
    """Migrate the database at `url` to `revision` (a SQLite file is created first).

    Returns where it is now, and what the migrations said of the data they changed (see `upgrade`).
    """
    engine = open_database(url, ensure_schema=False)
    notes = upgrade(engine, revision)
    return current_revision(engine), notes


def dispose_all() -> None:
    """Close every engine `open_database` made (tests call this between databases)."""
    for engine in list(_opened_engines):
        engine.dispose()
    _opened_engines.clear()
    _opened.cache_clear()


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def open_sessions(url: str, *, existing: bool = False) -> sessionmaker[Session]:
    """A session factory on the database at `url` (what every command opens).

    Args:
        existing: for commands that only read: a SQLite file that does not exist is an
            error naming its path, not a new empty store.
    """
    return session_factory(open_database(url, existing=existing))


def as_utc(value: datetime | None) -> datetime | None:
    """A datetime read from the store, as UTC: SQLite gives back naive datetimes; everything preflab stores is UTC."""
    return value.replace(tzinfo=timezone.utc) if value is not None and value.tzinfo is None else value
