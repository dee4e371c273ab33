"""A command that only reads never creates a database; one that writes creates the default.

A typo in a SQLite path must not look like an empty project: `stats` on a file that
does not exist stops with one line naming the path and creates nothing, not even
its folder. Also here: `postgres://` is PostgreSQL, and no lock file is left beside
a SQLite database once it has been created.
"""

import os

import pytest
from click.testing import CliRunner

from preflab.cli import cli

READ_ONLY = [
    ["stats"],
    ["stats", "--json"],
    ["export", "OUT"],
    ["report", "OUT/report.html"],
    ["quarantine", "list"],
    ["quarantine", "show", "1"],
    ["annotators"],
    ["judge", "report"],
    ["train", "eval", "reward-1"],
    ["self-reward", "report"],
    ["db", "current"],
    ["bon", "estimate", "--from-db", "--proxy", "judge-1"],
    ["bon", "frontier", "--policy", "policy-1", "--proxy", "reward-1", "--out", "OUT/frontier.png"],
]


@pytest.mark.parametrize("args", READ_ONLY, ids=" ".join)
@pytest.mark.parametrize("how", ["option", "environment"])
def test_a_read_on_a_database_that_does_not_exist_creates_nothing(args, how, tmp_path, monkeypatch):
    missing = tmp_path / "nonexistent-dir" / "x" / "y.db"
    url = f"sqlite:///{missing}"
    before = sorted(tmp_path.rglob("*"))
    args = [a.replace("OUT", str(tmp_path / "out")) for a in args]
    if how == "option":
        result = CliRunner().invoke(cli, ["--database-url", url, *args])
    else:
        monkeypatch.setenv("PREFLAB_DATABASE_URL", url)
        result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    assert result.output == (
        f"Error: there is no preflab database at {missing}: check --database-url or "
        f"PREFLAB_DATABASE_URL (commands that write, such as `preflab import`, create it)\n"
    )
    assert sorted(tmp_path.rglob("*")) == before  # no folder, no file, no export


def test_the_default_database_is_still_created_by_a_command_that_writes(tmp_path, sample_rankings):
    home = tmp_path / "home"  # PREFLAB_HOME (the autouse fixture): the default SQLite file lives here
    assert CliRunner().invoke(cli, ["stats"]).exit_code == 1
    assert not (home / "preflab.db").exists()
    result = CliRunner().invoke(cli, ["import", "rankings", str(sample_rankings)])
    assert result.exit_code == 0, result.output
    assert (home / "preflab.db").is_file()
    assert CliRunner().invoke(cli, ["stats"]).exit_code == 0


def test_reads_on_an_existing_database_still_work(tmp_path, sample_rankings):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    assert CliRunner().invoke(cli, ["--database-url", url, "import", "rankings", str(sample_rankings)]).exit_code == 0
    for args in (["stats"], ["quarantine", "list"], ["annotators"], ["judge", "report"]):
        result = CliRunner().invoke(cli, ["--database-url", url, *args])
        assert result.exit_code == 0, (args, result.output)


@pytest.mark.postgres
def test_postgres_urls_are_postgresql(postgres_url, sample_rankings):
    """libpq, Heroku and most hosts write `postgres://`: it names the same database."""
    url = postgres_url.replace("postgresql+psycopg://", "postgres://", 1)
    assert url.startswith("postgres://")
    result = CliRunner().invoke(cli, ["--database-url", url, "import", "rankings", str(sample_rankings), "--json"])
    assert result.exit_code == 0, result.output
    same = CliRunner().invoke(cli, ["--database-url", postgres_url, "stats", "--json"])
    assert same.exit_code == 0, same.output
    assert '"rankings"' in same.output
    other = CliRunner().invoke(cli, ["--database-url", url, "import", "rankings", str(sample_rankings), "--json"])
    assert '"imported": 0' in other.output  # the same store: everything is a duplicate
    shown = CliRunner().invoke(cli, ["--database-url", "postgres://admin:hunter2@127.0.0.1:1/prefs", "stats"])
    assert shown.exit_code == 1 and "hunter2" not in shown.output
    assert shown.output.startswith("Error: cannot open the database at postgresql://admin:***@127.0.0.1:1/prefs")


def test_no_lock_file_is_left_beside_a_new_sqlite_database(tmp_path, monkeypatch, sample_rankings):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        cli, ["--database-url", "sqlite:///relative.db", "import", "rankings", str(sample_rankings)]
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("relative.db-")) == ["relative.db"]
    assert not os.path.exists(tmp_path / "relative.db.migrate-lock")
