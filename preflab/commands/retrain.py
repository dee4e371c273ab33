"""`preflab retrain` (the scheduled job) and `preflab schedule` (the scheduler that runs it)."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

import click

from preflab.commands.options import echo_result, json_option, pass_settings
from preflab.console import Reporter
from preflab.settings import Settings

CONFIG_DEFAULT = "default: PREFLAB_RETRAIN_CONFIG, else DATA_DIR/retrain.toml."
# `retrain --help` shows the file's keys itself; the scheduler's help points there.
CONFIG_HELP = f"Retrain config (TOML or JSON: what to train, as described above); {CONFIG_DEFAULT}"
SCHEDULE_CONFIG_HELP = f"Retrain config (TOML or JSON; its keys: `preflab retrain --help`); {CONFIG_DEFAULT}"


@contextmanager
def _sigterm_exits():
    """SIGTERM (from a scheduler, systemd or Kubernetes) unwinds like Ctrl-C: the run is recorded as
    failed and the lease is given back, instead of the process vanishing mid-transaction."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def exit_now(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, exit_now)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@click.command("retrain")
@click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), envvar="PREFLAB_RETRAIN_CONFIG", help=CONFIG_HELP
)
@click.option(
    "--min-new",
    type=click.IntRange(min=0),
    help="New comparisons needed to retrain (default: the config's min_new, else 100).",
)
@json_option
@pass_settings
def retrain_command(settings: Settings, config_path, min_new, as_json):
    """Retrain on the new comparisons if at least --min-new arrived; else say "nothing to do" (exit 0).

    Two overlapping runs never both train: a lease in the database, held while
    training and renewed in the background, makes the second one skip (exit 0);
    a crashed run's lease expires after `lock_ttl` seconds. A model version that
    trains becomes the current one of its kind; a failed run (exit 1) leaves the
    previous one current. The config file (TOML, or JSON with the same keys)
    names what to train; each table takes the options of the command named,
    with underscores (num_train_epochs for --num-train-epochs):

    \b
        min_new = 100                    # new comparisons needed to retrain
        model = "smollm2-135m-instruct"  # starting model (default: the global --model)
        start_from = "base"              # or "current": go on from the current model version
        lock_ttl = 600                   # seconds a crashed run's lease outlives it
        report = "report.html"           # write `preflab report` here after every run
        [pairs]                          # `preflab pairs build`: strategy, aggregate, annotator_kind
        strategy = "all"
        [export]                         # `preflab export`: test_size, annotators, format, ...
        test_size = 0.1
        [reward]                         # a reward model: `preflab train reward` (+ model)
        grouped = true
        [dpo]                            # a DPO policy: `preflab train dpo` (+ model)
        beta = 0.1

    Example: preflab retrain --config retrain.toml --min-new 200
    """
    from preflab.db.engine import open_sessions
    from preflab.training.retrain.config import find_retrain_config, load_retrain_config
    from preflab.training.retrain.job import retrain

    config = load_retrain_config(find_retrain_config(config_path))
    reporter = Reporter(not as_json)
    with _sigterm_exits():
        result = retrain(
            open_sessions(settings.database_url),
            config,
            settings.model,
            min_new,
            reporter=reporter,
            after_run=_report_writer(config.report, reporter),
        )
    echo_result(as_json, result.as_dict(), lambda: result.message)


def _report_writer(path: str | None, reporter: Reporter):
    """Write `preflab report` to `path` after the run (the config's `report = "path"`)."""
    if not path:
        return None

    def write(sessions) -> None:
        # The page sits above every library layer; only this command joins it to the job.
        from preflab.report.build import write_report

        with sessions.begin() as session:
            write_report(session, path, reporter=reporter)
        reporter.note(f"wrote the report to {path}")

    return write


@click.command("schedule")
@click.option(
    "--cron",
    required=True,
    metavar="EXPR",
    help='When to run, as a crontab line: "0 3 * * *" is 03:00 every day (6 fields: seconds first).',
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    envvar="PREFLAB_RETRAIN_CONFIG",
    help=SCHEDULE_CONFIG_HELP,
)
@click.option("--min-new", type=click.IntRange(min=0), help="Passed to each `preflab retrain` run.")
@click.option("--timezone", default="UTC", show_default=True, help="Time zone the cron expression is read in.")
@click.option("--run-now", is_flag=True, help="Also run once immediately.")
@click.option("--max-runs", type=click.IntRange(min=1), help="Stop after this many runs (default: run until stopped).")
@click.option("--timeout", type=click.FloatRange(min=1), help="Stop a run that takes longer than this many seconds.")
@click.option("--log-file", type=click.Path(dir_okay=False), help="Also append the log to this file.")
@pass_settings
def schedule_command(settings: Settings, cron, config_path, min_new, timezone, run_now, max_runs, timeout, log_file):
    """Run `preflab retrain` on a cron schedule until stopped, logging each run.

    Each run is a child process with the database URL in its environment; runs
    never overlap, and missed runs (the machine slept) are coalesced into one.
    SIGTERM or Ctrl-C stops the scheduler (and a run in progress).

    Example: preflab schedule --cron "0 3 * * *" --config retrain.toml --log-file retrain.log
    """
    from preflab.training.retrain.config import find_retrain_config
    from preflab.training.retrain.schedule import schedule_retrain

    runs = schedule_retrain(
        settings.database_url,
        settings.model,
        find_retrain_config(config_path),
        cron,
        timezone,
        min_new,
        run_now,
        max_runs,
        timeout,
        log_file,
        described_url=settings.redacted_url(),
    )
    click.echo(f"scheduler stopped after {runs} run(s)")
