"""A transaction that loses a race is run again; a database URL preflab cannot use is one sentence."""

import pytest
from click.testing import CliRunner
from sqlalchemy import insert, select, update

from preflab.cli import cli
from preflab.db.engine import make_engine, open_database, session_factory
from preflab.db.models import JobLock, utcnow
from preflab.db.transactions import in_transaction
from preflab.errors import DatabaseError


@pytest.mark.postgres
def test_a_serialization_failure_is_retried_and_the_retry_commits(postgres_url):
    sessions = session_factory(open_database(postgres_url))
    with sessions.begin() as s:
        s.execute(insert(JobLock).values(name="row", holder="start", expires_at=utcnow()))
    other = make_engine(postgres_url)
    attempts = []

    def work(session):
        attempts.append(session.scalar(select(JobLock.holder)))  # the snapshot is taken here
        if len(attempts) == 1:  # another writer changes the row after our snapshot
            with other.begin() as conn:
                conn.execute(update(JobLock).values(holder="other"))
        session.execute(update(JobLock).values(holder=f"work saw {attempts[-1]}"))
        return len(attempts)

    assert in_transaction(sessions, work, isolation="REPEATABLE READ") == 2
    assert attempts == ["start", "other"]
    with sessions.begin() as s:
        assert s.scalar(select(JobLock.holder)) == "work saw other"
    other.dispose()


def test_retries_are_bounded_and_end_in_one_sentence(sessions):
    with sessions.begin() as s:
        s.execute(insert(JobLock).values(name="taken", holder="x", expires_at=utcnow()))
    attempts = []

    def work(session):  # always collides on the primary key, as a lost race would
        attempts.append(1)
        session.execute(insert(JobLock).values(name="taken", holder="y", expires_at=utcnow()))

    with pytest.raises(DatabaseError) as raised:
        in_transaction(sessions, work, attempts=3)
    assert len(attempts) == 3
    message = str(raised.value)
    assert message.startswith("a write to the database failed 3 times (another writer added the same row first")
    assert message.endswith("what was saved before it is kept: run the command again to resume")


def test_other_database_errors_are_not_retried(sessions):
    attempts = []

    def work(session):
        attempts.append(1)
        session.execute(insert(JobLock).values(name=None, holder="y", expires_at=utcnow()))

    with pytest.raises(Exception) as raised:
        in_transaction(sessions, work)
    assert len(attempts) == 1 and not isinstance(raised.value, DatabaseError)


@pytest.mark.parametrize(
    "url, message",
    [
        (
            "mysql://admin:hunter2@db.example/prefs",
            "preflab stores its data in SQLite or PostgreSQL, and cannot use mysql://admin:***@db.example/prefs",
        ),
        (
            "postgresql+asyncpg://admin:hunter2@localhost/prefs",
            "preflab stores its data in SQLite or PostgreSQL, and cannot use postgresql+asyncpg://admin:***@localhost/prefs",
        ),
        ("not a url", "'not a url' is not a database URL"),
        (
            "postgresql://admin:hunter2@localhost:port/prefs",
            "'postgresql://admin:***@localhost:port/prefs' is not a database URL",
        ),
        (
            "postgresql://admin:hunter2@127.0.0.1:1/prefs",
            "cannot open the database at postgresql://admin:***@127.0.0.1:1/prefs",
        ),
        ("sqlite:////proc/preflab/db.sqlite", "there is no preflab database at /proc/preflab/db.sqlite"),
    ],
)
def test_a_database_url_preflab_cannot_use_is_one_sentence(url, message, monkeypatch):
    for args, env in (((["--database-url", url]), {}), ([], {"PREFLAB_DATABASE_URL": url})):
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        result = CliRunner().invoke(cli, [*args, "stats"])
        assert result.exit_code == 1
        assert result.output.startswith(f"Error: {message}") and result.output.count("\n") == 1, result.output
        assert "hunter2" not in result.output and "Traceback" not in result.output


def test_an_unwritable_sqlite_path_is_one_sentence_for_a_command_that_writes(sample_rankings):
    url = "sqlite:////proc/preflab/db.sqlite"
    result = CliRunner().invoke(cli, ["--database-url", url, "import", "rankings", str(sample_rankings)])
    assert result.exit_code == 1
    assert result.output.startswith("Error: cannot create the SQLite database /proc/preflab/db.sqlite")
    assert result.output.count("\n") == 1 and "Traceback" not in result.output


def test_a_file_that_is_not_a_database_is_one_sentence(tmp_path):
    path = tmp_path / "rankings.jsonl"
    path.write_text('{"prompt": "not a database"}\n' * 100)
    result = CliRunner().invoke(cli, ["--database-url", f"sqlite:///{path}", "stats"])
    assert result.exit_code == 1
    assert result.output == f"Error: cannot open the database at sqlite:///{path}: file is not a database\n"


def test_two_processes_opening_a_fresh_sqlite_file_migrate_it_once(tmp_path):
    from .procs import finish, start

    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    procs = [start(url, "pairs", "build", "--json") for _ in range(3)]
    for code, _, err in (finish(p) for p in procs):
        assert code == 0 and not err.strip(), err
