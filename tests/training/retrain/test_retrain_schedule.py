"""`preflab schedule`: an APScheduler that runs `preflab retrain` on a cron schedule and logs each run."""

from datetime import datetime, timezone

import pytest
from click.testing import CliRunner

from preflab.cli import cli
from preflab.training.retrain.schedule import cron_trigger

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out


def write_config(folder):
    """A config whose runs never get as far as training (the store stays empty)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "retrain.toml"
    path.write_text("min_new = 10\n\n[reward]\nmax_steps = 1\n", encoding="utf-8")
    return path


def test_cron_lines_are_read_with_or_without_seconds():
    after = datetime(2026, 1, 1, 4, 0, tzinfo=timezone.utc)
    assert cron_trigger("0 3 * * *").get_next_fire_time(None, after) == datetime(2026, 1, 2, 3, 0, tzinfo=timezone.utc)
    every_second = cron_trigger("* * * * * *").get_next_fire_time(None, after.replace(microsecond=500))
    assert every_second == datetime(2026, 1, 1, 4, 0, 1, tzinfo=timezone.utc)


def test_the_scheduler_fires_the_retrain_job_at_a_test_schedule(sqlite_url, tmp_path):
    config = write_config(tmp_path / "retrain")
    log_file = tmp_path / "schedule.log"
    result = CliRunner().invoke(
        cli,
        [
            "--database-url",
            sqlite_url,
            "schedule",
            "--cron",
            "* * * * * *",
            "--config",
            str(config),
            "--max-runs",
            "2",
            "--log-file",
            str(log_file),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert "scheduler stopped after 2 run(s)" in result.stdout
    log = log_file.read_text(encoding="utf-8")
    for n in (1, 2):
        assert f"run {n} started: preflab retrain --config {config}" in log
        assert f"run {n} finished with exit code 0" in log
    # Each run was a real `preflab retrain` on the database: an empty store has nothing to train on.
    assert log.count("nothing to do: 0 new comparisons in the store (at least 10 needed)") == 2
    # The URL reached each child through its environment, not its command line (where `ps` shows it).
    assert all("--database-url" not in line for line in log.splitlines() if "started:" in line)
    started = [datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S") for line in log.splitlines() if "started:" in line]
    assert len(started) == 2 and (started[1] - started[0]).total_seconds() >= 1


@pytest.mark.parametrize(
    "cron, message",
    [
        ("61 * * * *", "is not a valid schedule"),
        ("0 3 * *", "must have 5 fields"),
    ],
)
def test_a_bad_schedule_is_one_sentence(sqlite_url, tmp_path, cron, message):
    config = write_config(tmp_path / "retrain")
    result = CliRunner().invoke(
        cli, ["--database-url", sqlite_url, "schedule", "--cron", cron, "--config", str(config)]
    )
    assert result.exit_code == 1 and message in result.output and result.output.startswith("Error: --cron")
