"""Alembic environment: the engine comes from preflab (never from an ini file)."""

from alembic import context

from preflab.db import requests as _requests  # noqa: F401  (its table is on Base's metadata)
from preflab.db.models import Base

config = context.config
engine = config.attributes.get("engine")
if engine is None:  # plain `alembic` invocation: no click to read PREFLAB_DATABASE_URL, so read it here
    import os

    from preflab.db.engine import make_engine
    from preflab.settings import default_database_url

    engine = make_engine(os.environ.get("PREFLAB_DATABASE_URL") or default_database_url())

with engine.connect() as connection:
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        # A batch migration may recreate a table (copy, drop, rename). With foreign keys on,
        # dropping the old table would cascade-delete every row that references it, so they
        # are off while migrating, and checked before the migration commits.
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
    try:
        context.configure(
            connection=connection,
            target_metadata=Base.metadata,
            render_as_batch=True,
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
            if sqlite:
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise RuntimeError(
                        f"the migration left {len(broken)} rows whose foreign keys point nowhere, "
                        f"first {broken[0]}; it was rolled back"
                    )
        connection.commit()
    finally:
        if sqlite:
            connection.exec_driver_sql("PRAGMA foreign_keys=ON")
