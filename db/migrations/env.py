"""Alembic environment: the engine comes from preflab (never from an ini file)."""

from alembic import context

from preflab.db.models import Base

config = context.config
engine = config.attributes.get("engine")
if engine is None:  # plain `alembic` invocation: PREFLAB_DATABASE_URL or the default
    from preflab.db.engine import make_engine
    from preflab.settings import Settings

    engine = make_engine(Settings.resolve().database_url)

with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
