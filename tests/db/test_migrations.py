"""The models and the migrations agree; SQLite migrates itself, Postgres only by `db upgrade`."""

import shutil

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from click.testing import CliRunner
from sqlalchemy import inspect, text
from sqlalchemy.engine import make_url

from preflab.db import requests as _requests  # noqa: F401  (its table is on Base's metadata)
from preflab.db.engine import current_revision, dispose_all, head_revision, make_engine, open_database, upgrade
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
    result = CliRunner().invoke(cli, ["pairs", "build", "--json"])
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


# --- Postgres is migrated only by `preflab db upgrade` ----------------------------------------

OURS = head_revision()
NEXT = f"{int(OURS) + 1:04d}"
NEXT_REVISION = f'''"""A later migration, as a newer preflab would ship it."""

revision = "{NEXT}"
down_revision = "{OURS}"
branch_labels = None
depends_on = None


def upgrade():
    pass


def downgrade():
    pass
'''


@pytest.fixture
def newer_preflab(tmp_path, monkeypatch):
    """`newer_preflab(True)` makes this process a preflab with one more migration (NEXT); False undoes it."""
    import preflab.db.engine as engine_module

    ours = engine_module.MIGRATIONS
    folder = tmp_path / "migrations"
    shutil.copytree(ours, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "versions" / f"{NEXT}_next.py").write_text(NEXT_REVISION, encoding="utf-8")

    def switch(newer: bool) -> None:
        monkeypatch.setattr(engine_module, "MIGRATIONS", folder if newer else ours)
        assert head_revision() == (NEXT if newer else OURS)

    return switch


def run(url, *args):
    from preflab.cli import cli

    dispose_all()  # each call starts afresh, as a new process would
    return CliRunner().invoke(cli, ["--database-url", url, *args])


def stored_revision(url):
    engine = make_engine(url)
    try:
        return current_revision(engine)
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_fresh_postgres_is_not_migrated_on_open_and_db_upgrade_migrates_it(empty_postgres_url):
    url = empty_postgres_url.replace("postgres@", "postgres:s3cret-pw@")  # trust auth ignores the password
    result = run(url, "stats")
    assert result.exit_code == 1 and "Traceback" not in result.output
    shown = make_url(url).set(drivername="postgresql").render_as_string(hide_password=True)
    assert result.output == (f'Error: the database at {shown} has no preflab schema yet: run "preflab db upgrade"\n')
    assert "s3cret-pw" not in result.output
    assert stored_revision(url) is None
    engine = make_engine(url)
    assert inspect(engine).get_table_names() == []
    engine.dispose()

    upgraded = run(url, "db", "upgrade")
    assert upgraded.exit_code == 0 and head_revision() in upgraded.output and "s3cret-pw" not in upgraded.output
    assert run(url, "stats", "--json").exit_code == 0


@pytest.mark.postgres
def test_older_postgres_revision_is_named_and_left_alone(empty_postgres_url, newer_preflab):
    engine = make_engine(empty_postgres_url)
    upgrade(engine)  # what this preflab made: OURS
    engine.dispose()
    newer_preflab(True)

    result = run(empty_postgres_url, "stats")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.count("\n") == 1
    assert f'is at revision {OURS}; this preflab needs {NEXT}: run "preflab db upgrade"' in result.output
    assert stored_revision(empty_postgres_url) == OURS  # not upgraded behind the team's back

    upgraded = run(empty_postgres_url, "db", "upgrade")
    assert upgraded.exit_code == 0 and f"is at revision {NEXT}" in upgraded.output
    assert stored_revision(empty_postgres_url) == NEXT
    assert run(empty_postgres_url, "stats").exit_code == 0


@pytest.mark.postgres
def test_postgres_migrated_by_a_newer_preflab_says_so(postgres_url, newer_preflab):
    newer_preflab(True)
    assert run(postgres_url, "db", "upgrade").exit_code == 0
    newer_preflab(False)
    for args in (["stats"], ["db", "upgrade"]):
        result = run(postgres_url, *args)
        assert result.exit_code == 1 and "Traceback" not in result.output
        assert f"is at revision {NEXT}, which a newer preflab made" in result.output
    assert stored_revision(postgres_url) == NEXT


def test_sqlite_is_migrated_on_open_by_a_newer_preflab(sqlite_url, newer_preflab):
    assert current_revision(open_database(sqlite_url)) == OURS
    newer_preflab(True)
    result = run(sqlite_url, "stats")
    assert result.exit_code == 0, result.output
    assert stored_revision(sqlite_url) == NEXT


def test_migrating_a_filled_store_keeps_every_row(cli, db_url, sample_rankings):
    """Down to the first revision and up again: every row of every table survives.

    On SQLite a batch migration recreates tables; with foreign keys on, dropping the
    old `rankings` once cascaded away every ranking item.
    """
    from alembic import command

    from preflab.db.engine import alembic_config

    cli("import", "rankings", sample_rankings)
    cli("pairs", "build")
    engine = make_engine(db_url)
    tables = (
        "prompts",
        "candidates",
        "annotators",
        "raw_records",
        "rankings",
        "ranking_items",
        "pair_builds",
        "comparisons",
    )

    def counts():
        with engine.connect() as conn:
            return {t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar() for t in tables}

    before = counts()
    assert before["ranking_items"] > 0 and before["comparisons"] > 0
    command.downgrade(alembic_config(engine), "0001")
    assert counts() == before
    upgrade(engine)
    assert counts() == before
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1  # back on after migrating
            assert conn.execute(text("PRAGMA foreign_key_check")).fetchall() == []
    # Builds from before incremental pairs have no mode: the next build is a full one.
    assert '"mode": "full"' in cli("pairs", "build", "--json").output
    assert counts()["comparisons"] == before["comparisons"]
    engine.dispose()


@pytest.mark.postgres
def test_raw_payloads_are_lz4_compressed_on_postgres_and_back_to_the_default_below_0006(postgres_url):
    # pglz made the raw records 1.57 s of a 10,000-task sync's COPYs; lz4 0.92 s (bench/README.md).
    from alembic import command

    from preflab.db.engine import alembic_config

    engine = make_engine(postgres_url)
    query = text(
        "SELECT attcompression FROM pg_attribute WHERE attrelid = 'raw_records'::regclass AND attname = 'payload'"
    )
    with engine.connect() as conn:
        assert conn.execute(query).scalar() == "l"
    command.downgrade(alembic_config(engine), "0005")
    with engine.connect() as conn:
        assert conn.execute(query).scalar() == ""
    upgrade(engine)
    engine.dispose()


def test_ranking_items_are_clustered_by_ranking_from_0008_and_not_below(cli, db_url, sample_rankings):
    # Inserting 650,000 items took 1.8 s against 2.5 s with the extra B-trees (bench/README.md).
    from alembic import command

    from preflab.db.engine import alembic_config

    cli("import", "rankings", sample_rankings)
    engine = make_engine(db_url)

    def shape():
        with engine.connect() as conn:
            indexes = {i["name"] for t in ("ranking_items", "candidates") for i in inspect(conn).get_indexes(t)}
            rows = conn.execute(
                text(
                    "SELECT ranking_id, candidate_id, tier, shown_position, score "
                    "FROM ranking_items ORDER BY ranking_id, candidate_id"
                )
            ).all()
            clustered = (
                engine.dialect.name == "sqlite"
                and "WITHOUT ROWID"
                in conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'ranking_items'")).scalar()
            )
        return indexes & {"ix_ranking_items_ranking_tier", "ix_candidates_prompt_id"}, clustered, rows

    indexes, clustered, rows = shape()
    assert indexes == set() and clustered == (engine.dialect.name == "sqlite") and rows
    command.downgrade(alembic_config(engine), "0007")
    assert shape() == ({"ix_ranking_items_ranking_tier", "ix_candidates_prompt_id"}, False, rows)
    upgrade(engine)
    assert shape() == (indexes, clustered, rows)
    engine.dispose()


def test_ranking_items_name_their_model_from_0011_and_stay_clustered_below_it(cli, db_url, sample_rankings):
    from alembic import command

    from preflab.db.engine import alembic_config

    cli("import", "rankings", sample_rankings)
    engine = make_engine(db_url)

    def shape():
        with engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("ranking_items")}
            rows = conn.execute(
                text(
                    "SELECT ranking_id, candidate_id, tier, shown_position, score "
                    "FROM ranking_items ORDER BY ranking_id, candidate_id"
                )
            ).all()
            clustered = (
                engine.dialect.name == "sqlite"
                and "WITHOUT ROWID"
                in conn.execute(text("SELECT sql FROM sqlite_master WHERE name = 'ranking_items'")).scalar()
            )
        return "model" in columns, clustered, rows

    with engine.connect() as conn:
        named = conn.execute(text("SELECT count(*) FROM ranking_items WHERE model IS NOT NULL")).scalar()
    assert named > 0  # the sample names each reply's model
    has_model, clustered, rows = shape()
    assert has_model and clustered == (engine.dialect.name == "sqlite") and len(rows) >= named
    command.downgrade(alembic_config(engine), "0010")
    assert shape() == (False, clustered, rows)
    upgrade(engine)
    assert shape() == (True, clustered, rows)
    engine.dispose()
