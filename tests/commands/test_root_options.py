"""The root options: click alone reads option, then environment, then default; `-v` means one thing everywhere."""

from __future__ import annotations

import json
import logging

import pytest
from click.testing import CliRunner

from preflab.cli import cli

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out


def test_the_database_is_the_option_else_the_environment_else_the_default(tmp_path, monkeypatch):
    monkeypatch.setenv("PREFLAB_HOME", str(tmp_path / "home"))
    given, from_env = f"sqlite:///{tmp_path / 'given.db'}", f"sqlite:///{tmp_path / 'env.db'}"
    runner = CliRunner()

    def current(*args: str) -> str:
        result = runner.invoke(cli, [*args, "db", "upgrade"])
        assert result.exit_code == 0, result.output
        return result.stdout

    monkeypatch.setenv("PREFLAB_DATABASE_URL", from_env)
    assert current("--database-url", given).startswith(f"{given} is at revision")
    assert current().startswith(f"{from_env} is at revision")
    assert current("--database-url", "").startswith(f"{from_env} is at revision")  # an empty option is unset
    monkeypatch.setenv("PREFLAB_DATABASE_URL", "")  # empty counts as unset
    assert current().startswith(f"sqlite:///{tmp_path / 'home' / 'preflab.db'} is at revision")
    assert current("--database-url", "").startswith(f"sqlite:///{tmp_path / 'home' / 'preflab.db'} is at revision")


def test_a_demo_uses_the_database_only_when_one_was_given(tmp_path, monkeypatch):
    """The default URL is click's now, so a demo asks where the URL came from, not whether there is one."""
    from preflab.commands.demo import _given_database
    from preflab.settings import Settings

    monkeypatch.setenv("PREFLAB_HOME", str(tmp_path))
    given = f"sqlite:///{tmp_path / 'given.db'}"

    def chosen(*args: str) -> str | None:
        with cli.make_context("preflab", [*args, "demo"]) as ctx:
            return _given_database(Settings(ctx.params["database_url"]))

    monkeypatch.delenv("PREFLAB_DATABASE_URL", raising=False)
    assert chosen() is None  # the demo's own SQLite file in its work folder
    assert chosen("--database-url", given) == given
    monkeypatch.setenv("PREFLAB_DATABASE_URL", given)
    assert chosen() == given


def test_verbose_logs_at_info_on_stderr_and_every_command_reports_alike(tmp_path):
    """`report` shows its notes as every command does; `-v` adds the log, a command's notes under --json included."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    runner = CliRunner()
    handlers = list(logging.getLogger().handlers)

    def run(*args):
        result = runner.invoke(cli, ["--database-url", url, *map(str, args)])
        assert result.exit_code == 0, result.output
        return result

    upgraded = run("-v", "db", "upgrade")
    assert "INFO alembic.runtime.migration: Running upgrade  -> 0001" in upgraded.stderr
    assert "sqlalchemy" not in upgraded.stderr  # no statements with their parameters
    assert upgraded.stdout.startswith(f"{url} is at revision")
    assert logging.getLogger().handlers == handlers  # the handler leaves with the command

    page = tmp_path / "report.html"
    assert "report: data" in run("report", page).stderr.splitlines()
    quiet = run("report", page, "--json")
    assert quiet.stderr == "" and json.loads(quiet.stdout)["path"] == str(page)
    verbose = run("-v", "report", page, "--json")
    assert "INFO preflab: report: data" in verbose.stderr.splitlines()
    assert json.loads(verbose.stdout)["path"] == str(page)  # stdout stays one JSON document
    assert "INFO" not in run("db", "upgrade").stderr


def test_verbose_writes_a_record_once_when_its_own_logger_already_writes_it(capsys):
    """The scheduler logs to stderr itself: `preflab -v schedule` must not print each line twice."""
    import sys

    import click

    from preflab.commands.options import log_to_stderr

    own, handler = logging.getLogger("preflab.test.own"), logging.StreamHandler(sys.stderr)
    own.addHandler(handler)
    try:
        with click.Context(cli) as ctx:
            log_to_stderr(ctx)
            own.info("the scheduler's line")
            logging.getLogger("preflab.test.other").info("another line")
    finally:
        own.removeHandler(handler)
    err = capsys.readouterr().err
    assert err.count("the scheduler's line") == 1 and "INFO preflab.test.other: another line" in err
