"""Shared fixtures: a fresh SQLite file or a fresh Postgres schema per test.

Postgres is the real server on 127.0.0.1:5432 (database `test`); each test gets
its own schema through `search_path`, migrated explicitly (preflab never migrates
Postgres on open) and dropped afterwards. Set PREFLAB_TEST_POSTGRES_URL to point
elsewhere.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

# huggingface_hub and datasets read HF_HUB_OFFLINE once, when first imported, which may be while a test
# module is collected: offline from the start, whatever imports them first (isolated_env sets it per test too).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import tests.properties
from tests.vllm_server import vllm_server  # noqa: F401  (one real vLLM server per session, started on first use)

POSTGRES_URL = os.environ.get("PREFLAB_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
SECRETS = (
    "LABEL_STUDIO_API_KEY",
    "HF_TOKEN",
    "PREFLAB_DATABASE_URL",
    "LABEL_STUDIO_URL",
    "PREFLAB_MODEL",
    "PREFLAB_WEBHOOK_SECRET",
)


def pytest_collection_modifyitems(items):
    # `make fuzz` selects the property tests with `-m property`.
    for item in items:
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.property)


def pytest_report_header(config):
    return f"hypothesis profile: {tests.properties.PROFILE}"


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """Every test gets its own preflab home and no credentials from the outside."""
    for name in SECRETS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PREFLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))
    yield
    from preflab.db.engine import dispose_all

    dispose_all()


def _postgres_schema_url(schema: str) -> str:
    return f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"


@pytest.fixture
def empty_postgres_url():
    """A fresh, empty schema on the real Postgres server (no preflab tables yet)."""
    from sqlalchemy import create_engine, text

    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_URL)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))  # identifier we generated, not user input
    yield _postgres_schema_url(schema)
    from preflab.db.engine import dispose_all

    dispose_all()
    with admin.begin() as conn:
        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    admin.dispose()


@pytest.fixture
def postgres_url(empty_postgres_url):
    """A fresh schema on the real Postgres server, migrated to head as `preflab db upgrade` does.

    preflab never migrates Postgres implicitly, so a test database is upgraded explicitly.
    """
    from preflab.db.engine import make_engine, upgrade

    engine = make_engine(empty_postgres_url)
    upgrade(engine)
    engine.dispose()
    return empty_postgres_url


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'preflab.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    """Run the test on a fresh SQLite file and on a fresh Postgres schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'preflab.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def sessions(db_url):
    """A session factory on the migrated database."""
    from preflab.db.engine import open_database, session_factory

    return session_factory(open_database(db_url))


@pytest.fixture
def cli(db_url):
    """Run `preflab --database-url <db> ARGS…` in-process; returns the click Result."""
    from preflab.cli import cli as root

    runner = CliRunner()

    def run(*args, input=None, expect_ok=True):
        result = runner.invoke(root, ["--database-url", db_url, *map(str, args)], input=input, catch_exceptions=False)
        if expect_ok:
            assert result.exit_code == 0, result.output
        return result

    return run


@pytest.fixture
def sample_rankings() -> Path:
    from importlib.resources import files

    return Path(str(files("preflab.db.samples") / "rankings.jsonl"))
