"""Engines, sessions and migrations.

`open_database(url)` is what every command uses: it creates the SQLite file's
directory, turns foreign keys on for every SQLite connection, and brings the
schema to the newest migration the first time a URL is opened in a process.
"""

from __future__ import annotations

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


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Run the migrations up to `revision` on `engine`."""
    from alembic import command

    command.upgrade(alembic_config(engine), revision)


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS)).get_current_head()


_opened_engines: list[Engine] = []


@lru_cache(maxsize=None)
def _opened(url: str, migrate: bool) -> Engine:
    engine = make_engine(url)
    try:
        if migrate and current_revision(engine) != head_revision():
            upgrade(engine)
    except (OperationalError, ProgrammingError) as exc:
        shown = make_url(url).render_as_string(hide_password=True)
        reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
        raise DatabaseError(f"cannot open the database at {shown}: {reason}") from None
    _opened_engines.append(engine)
    return engine


def open_database(url: str, migrate: bool = True) -> Engine:
    """An engine for `url`, migrated to the newest schema (once per process)."""
    return _opened(url, migrate)


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
