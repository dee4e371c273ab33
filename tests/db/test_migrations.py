"""The models and the migrations agree, on SQLite and on Postgres."""

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from preflab.db.engine import current_revision, head_revision, make_engine, open_database, upgrade
from preflab.db.models import Base


def test_migrations_match_models(db_url):
    engine = open_database(db_url)
    assert current_revision(engine) == head_revision()
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == []


def test_default_sqlite_database_is_created_on_first_use(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from preflab.cli import cli

    monkeypatch.setenv("PREFLAB_HOME", str(tmp_path / "state"))
    result = CliRunner().invoke(cli, ["stats", "--json"])
    assert result.exit_code == 0, result.output
    db = tmp_path / "state" / "preflab.db"
    assert db.exists()
    assert "rankings" in inspect(make_engine(f"sqlite:///{db}")).get_table_names()


def test_db_upgrade_command_and_downgrade(cli, db_url):
    result = cli("db", "upgrade")
    assert head_revision() in result.output
    engine = make_engine(db_url)
    upgrade(engine)  # idempotent
    from alembic import command

    from preflab.db.engine import alembic_config

    command.downgrade(alembic_config(engine), "base")
    assert "rankings" not in inspect(engine).get_table_names()
    cli("db", "upgrade")
    assert "rankings" in inspect(engine).get_table_names()
    engine.dispose()


def test_sqlite_enforces_foreign_keys(sqlite_url):
    engine = open_database(sqlite_url)
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
