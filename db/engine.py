"""Engines, sessions and migrations.

`open_database(url)` is what every command uses: it creates the SQLite file's
directory and turns foreign keys on for every SQLite connection. A SQLite file is
local and has one user, so it is created and migrated on first use. Any other
database (a team's Postgres) is never migrated behind its users' backs: it must
already be at the newest revision, and `preflab db upgrade` is the one way there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from sqlalchemy import create_engine, event, inspect
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.orm import Session, sessionmaker

from preflab.errors import DatabaseError

MIGRATIONS = Path(__file__).with_name("migrations")


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if parsed.drivername == "postgresql":  # prefer psycopg 3, which we depend on
        parsed = parsed.set(drivername="postgresql+psycopg")
    return create_engine(parsed, pool_pre_ping=True)


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
    except (OperationalError, ProgrammingError) as exc:
        reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
        raise DatabaseError(f"cannot open the database at {shown_url(engine)}: {reason}") from None


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Run the migrations up to `revision` on `engine`.

    Raises:
        DatabaseError: the database is unreachable, or a newer preflab migrated it.
    """
    from alembic import command

    with _reachable(engine):
        _check_known(engine, current_revision(engine))
        command.upgrade(alembic_config(engine), revision)


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
        raise DatabaseError(f"the database at {shown_url(engine)} is at revision {revision}, which a newer "
                            f"preflab made (this one knows up to {head_revision()}): upgrade preflab") from None


def _ensure_schema(engine: Engine) -> None:
    """Migrate a SQLite file to head; require any other database to be at head already."""
    current, head = current_revision(engine), head_revision()
    if current == head:
        return
    _check_known(engine, current)
    if engine.dialect.name == "sqlite":
        upgrade(engine)
        return
    if current is None:
        raise DatabaseError(f'the database at {shown_url(engine)} has no preflab schema yet: '
                            f'run "preflab db upgrade"')
    raise DatabaseError(f'the database at {shown_url(engine)} is at revision {current}; this preflab needs '
                        f'{head}: run "preflab db upgrade"')


_opened_engines: list[Engine] = []


@lru_cache(maxsize=None)
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


def open_database(url: str, ensure_schema: bool = True) -> Engine:
    """An engine for `url` whose schema is at the newest revision (checked once per process).

    A SQLite file is created and migrated on first use; any other database must
    already be migrated (`preflab db upgrade`). With `ensure_schema=False` the
    engine comes as it is, for `db upgrade` and `db current`.

    Raises:
        DatabaseError: unreachable, not migrated (not SQLite), or migrated by a newer preflab.
    """
    return _opened(url, ensure_schema)


def upgrade_database(url: str, revision: str = "head") -> str | None:
    """Migrate the database at `url` to `revision` (a SQLite file is created first); returns where it is now."""
    engine = open_database(url, ensure_schema=False)
    upgrade(engine, revision)
    return current_revision(engine)


def dispose_all() -> None:
    """Close every engine `open_database` made (tests call this between databases)."""
    for engine in list(_opened_engines):
        engine.dispose()
    _opened_engines.clear()
    _opened.cache_clear()


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def open_sessions(url: str) -> sessionmaker[Session]:
    """A session factory on the database at `url` (what every command opens)."""
    return session_factory(open_database(url))


def table_names(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names())
