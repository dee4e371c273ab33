"""Shared fixtures: a fresh SQLite file or a fresh Postgres schema per test.

Postgres is the real server on 127.0.0.1:5432 (database `test`); each test gets
its own schema through `search_path`, migrated explicitly (preflab never migrates
Postgres on open) and dropped afterwards. Set PREFLAB_TEST_POSTGRES_URL to point
elsewhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
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
TEMPLATE_SCHEMA = "preflab_template_schema"  # stands for a test's own schema in `postgres_schema_sql`
SECRETS = (
    "LABEL_STUDIO_API_KEY",
    "HF_TOKEN",
    "PREFLAB_DATABASE_URL",
    "LABEL_STUDIO_URL",
    "PREFLAB_MODEL",
    "PREFLAB_WEBHOOK_SECRET",
)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's worker reads the groups (--dist loadgroup)
def pytest_collection_modifyitems(items):
    groups = {}
    for item in items:
        # `make fuzz` selects the property tests with `-m property`.
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.property)
        group = groups[item.nodeid] = _group(item)
        item.add_marker(pytest.mark.xdist_group(group))
        if group in ("label-studio", "vllm"):  # a real server: `make check` leaves these out
            item.add_marker(pytest.mark.slow)
    # The longest groups first, so that two workers finish together instead of one starting a ten-minute group
    # as the other runs out of work (a parallel run hands groups out in the order they were collected).
    rank = {group: place for place, group in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(groups[item.nodeid], len(rank)))  # stable: each group's own order is kept


def pytest_collection_finish(session):
    """A worker of `--dist loadgroup` stops the run if the groups were not applied (each test would go out alone:
    two vLLM servers, the benches run twice); pytest-xdist names them in the test's id, as `path::test@group`."""
    config, ids = session.config, [item.nodeid for item in session.items]
    if hasattr(config, "workerinput") and config.getvalue("loadgroup") and ids and not any("@" in i for i in ids):
        raise pytest.UsageError("pytest-xdist's groups were not applied to the tests' ids (see pyproject's pin)")


# The groups that take longest (measured on a quiet AMD draw: 444, 245 and 118 s of one worker), in that order.
LONGEST_FIRST = ("label-studio", "vllm", "tests/test_benches.py")


def _group(item) -> str:
    """Which tests a parallel run (pytest-xdist, `--dist loadgroup`) gives one worker together.

    Every test of Label Studio on one worker, and every test of vLLM on one (one server each: they are shared,
    and Label Studio's own SQLite store would be written by two at once); the rest a module to a worker, so a
    module's fixtures are made once.
    """
    fixtures = getattr(item, "fixturenames", ())
    if "ls_server" in fixtures:
        return "label-studio"
    if "vllm_server" in fixtures:
        return "vllm"
    return item.nodeid.split("::", 1)[0]


@pytest.hookimpl(tryfirst=True)  # before the fixture's own parameters are given
def pytest_generate_tests(metafunc):
    """A test marked `one_database` runs on SQLite only: what it checks does not pass through the store's SQL (a
    judge's numbers on an engine), and the store's part of it is tested on both databases elsewhere."""
    if "db_url" not in metafunc.fixturenames or not metafunc.definition.get_closest_marker("one_database"):
        return
    if any(mark.args and mark.args[0] == "db_url" for mark in metafunc.definition.iter_markers("parametrize")):
        return  # parametrised by hand already
    metafunc.definition.add_marker(pytest.mark.parametrize("db_url", ["sqlite"], indirect=True))


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        _one_thread_a_worker()
    # A parallel run's controller starts Label Studio once, before its workers, for all of them (ls_fixtures).
    if _controller(config) and _may_use_label_studio(config):
        from tests.labelling.ls_fixtures import share_with_workers

        share_with_workers()


def pytest_unconfigure(config):
    if _controller(config):
        from tests.labelling.ls_fixtures import stop_server

        stop_server()


def _one_thread_a_worker() -> None:
    """A worker of a parallel run computes on one thread, and so do the processes it starts: two workers on two
    cores, each with torch's thread per core, would be four threads on two cores waiting at each other's barriers
    (the tiny models gain nothing from a second thread)."""
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)


def _controller(config) -> bool:
    """Whether this process hands tests to pytest-xdist workers (`-n N`, N > 0) rather than running them."""
    return not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None))


def _may_use_label_studio(config) -> bool:
    """Whether the run may hold a test of Label Studio: its folders are among those given, and slow tests are not
    left out (`make check` leaves them out); nor does a server given by URL take its place."""
    from tests.labelling.ls_fixtures import label_studio_bin_path, started_elsewhere

    if "not slow" in (config.option.markexpr or "") or started_elsewhere():
        return False
    if not os.access(label_studio_bin_path(), os.X_OK):
        return False  # the fixture fails, saying why
    root = Path(__file__).resolve().parent
    homes = [root / "labelling", root / "server"]
    for arg in config.args or ["tests"]:
        path = (Path(config.invocation_params.dir) / arg.split("::", 1)[0]).resolve()
        if any(path == home or path in home.parents or home in path.parents for home in homes):
            return True
    return False


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


@pytest.fixture(scope="session")
def postgres_schema_sql():
    """What `preflab db upgrade` makes of an empty schema, as SQL (`pg_dump` of a schema migrated once per session).

    A test's schema replays it (`postgres_url`) instead of running the migrations again: 0.2 s of Alembic a test,
    on hundreds of tests. Every table, index, constraint, sequence and the `alembic_version` row come through
    pg_dump as they were made; the migrations themselves are tested on empty schemas (`empty_postgres_url`).
    """
    from sqlalchemy import create_engine, make_url, text

    from preflab.db.engine import make_engine, upgrade

    schema = f"t_template_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_URL)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))  # identifier we generated, not user input
    try:
        engine = make_engine(_postgres_schema_url(schema))
        upgrade(engine)
        engine.dispose()
        url = make_url(POSTGRES_URL)
        dump = subprocess.run(
            [
                *("pg_dump", "--schema", schema, "--inserts", "--no-owner", "--no-privileges", "--no-comments"),
                *("-h", url.host or "127.0.0.1", "-p", str(url.port or 5432), "-U", url.username or "postgres"),
                url.database or "postgres",
            ],
            env={**os.environ, **({"PGPASSWORD": url.password} if url.password else {})},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()
    # psql's own commands (\\restrict, from pg_dump 15.14 on) are no SQL; the test's schema exists already
    body = "\n".join(line for line in dump.splitlines() if not line.startswith(("\\", f"CREATE SCHEMA {schema};")))
    return body.replace(schema, TEMPLATE_SCHEMA)


@pytest.fixture
def postgres_url(empty_postgres_url, postgres_schema_sql):
    """A fresh schema on the real Postgres server, at the newest revision, as `preflab db upgrade` leaves one.

    preflab never migrates Postgres implicitly, so a test database is brought to head explicitly: by replaying
    what the migrations made of a schema once this session (`postgres_schema_sql`).
    """
    import psycopg
    from sqlalchemy import make_url

    schema = empty_postgres_url.rsplit("%3D", 1)[1]
    url = make_url(POSTGRES_URL).set(drivername="postgresql")
    with psycopg.connect(url.render_as_string(hide_password=False)) as conn:
        conn.execute(postgres_schema_sql.replace(TEMPLATE_SCHEMA, schema))  # no parameters: one script
    return empty_postgres_url


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'preflab.db'}"


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory) -> Path:
    """A SQLite store migrated to head once per session; `db_url` copies it (migrating is 0.1 s a test)."""
    from preflab.db.engine import make_engine, upgrade

    path = tmp_path_factory.mktemp("template") / "preflab.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    engine.dispose()  # the last connection closed: the write-ahead log is checkpointed into the file, and removed
    return path


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    """Run the test on a fresh SQLite file and on a fresh Postgres schema, each at the newest revision."""
    if request.param == "sqlite":
        path = tmp_path / "preflab.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        return f"sqlite:///{path}"
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
