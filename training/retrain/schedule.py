"""`preflab schedule`: a long-running APScheduler that runs the retrain job on a cron schedule.

Each run is a child process (`python -m preflab retrain …`), so the scheduler
itself never loads torch, a crash or a leak in training cannot take it down,
and the memory a run used is returned when it ends. Runs never overlap inside
one scheduler (one instance at a time; missed runs are coalesced into one), and
the retrain job's database lease keeps schedulers on several machines from
training twice. The database URL reaches the child through its environment,
never its command line (where `ps` would show a password).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from preflab.errors import InputError

log = logging.getLogger("preflab.schedule")
FIELDS_5 = ("minute", "hour", "day", "month", "day_of_week")


def cron_trigger(expression: str, timezone: str = "UTC"):
    """An APScheduler trigger from a crontab line: 5 fields, or 6 with seconds first."""
    from apscheduler.triggers.cron import CronTrigger

    parts = expression.split()
    try:
        if len(parts) == 5:
            return CronTrigger.from_crontab(expression, timezone=timezone)
        if len(parts) == 6:
            return CronTrigger(second=parts[0], **dict(zip(FIELDS_5, parts[1:])), timezone=timezone)
    except (ValueError, LookupError) as exc:
        raise InputError(f"--cron {expression!r} is not a valid schedule: {exc}") from None
    raise InputError(
        f"--cron {expression!r} must have 5 fields (minute hour day month weekday), or 6 with seconds first"
    )


@dataclass
class ChildJob:
    """Runs a command as a child process and logs how it went."""

    argv: list[str]
    env: dict[str, str]
    timeout: float | None = None
    runs: int = 0
    failures: int = 0
    running: subprocess.Popen | None = field(default=None, repr=False)

    def __call__(self) -> int:
        self.runs += 1
        number, start = self.runs, time.monotonic()
        log.info("run %d started: %s", number, " ".join(self.argv[2:]))
        self.running = subprocess.Popen(
            self.argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            out, err = self.running.communicate(timeout=self.timeout)
            code = self.running.returncode
        except subprocess.TimeoutExpired:
            self.running.terminate()  # SIGTERM: the retrain job records its run as failed and frees the lease
            out, err = self.running.communicate()
            code = self.running.returncode
            err += f"\nstopped after --timeout {self.timeout:g} s"
        finally:
            self.running = None
        for line in out.strip().splitlines():
            log.info("run %d: %s", number, line)
        if code != 0:
            self.failures += 1
            for line in err.strip().splitlines()[-10:]:
                log.error("run %d: %s", number, line)
        log.log(
            logging.INFO if code == 0 else logging.ERROR,
            "run %d finished with exit code %d in %.1f s",
            number,
            code,
            time.monotonic() - start,
        )
        return code


def retrain_job(
    database_url: str, model: str, config_path: str | None, min_new: int | None, timeout: float | None = None
) -> ChildJob:
    """The retrain job as a child `python -m preflab retrain` with the database URL in its environment."""
    argv = [sys.executable, "-m", "preflab", "retrain"]
    if config_path:
        argv += ["--config", os.path.abspath(config_path)]
    if min_new is not None:
        argv += ["--min-new", str(min_new)]
    env = {**os.environ, "PREFLAB_DATABASE_URL": database_url, "PREFLAB_MODEL": model}
    return ChildJob(argv, env, timeout)


def run_scheduler(
    trigger, job: Callable[[], int], timezone: str = "UTC", max_runs: int | None = None, run_now: bool = False
) -> int:
    """Run `job` on `trigger` until stopped (SIGINT/SIGTERM) or `max_runs` runs; returns the runs made."""
    from datetime import datetime

    from apscheduler.schedulers.blocking import BlockingScheduler

    scheduler = BlockingScheduler(timezone=timezone)
    runs = 0
    lock = threading.Lock()

    def fire() -> None:
        nonlocal runs
        try:
            job()
        except Exception:  # a job that cannot even start must not stop the schedule
            log.exception("the job raised")
        with lock:
            runs += 1
            if max_runs is not None and runs >= max_runs:
                log.info("stopping after %d run(s) (--max-runs)", runs)
                scheduler.shutdown(wait=False)

    extra = {"next_run_time": datetime.now(scheduler.timezone)} if run_now else {}
    scheduler.add_job(fire, trigger, id="retrain", max_instances=1, coalesce=True, misfire_grace_time=3600, **extra)

    def stop(signum, frame) -> None:
        log.info("stopping (signal %d)", signum)
        child = getattr(job, "running", None)
        if child is not None:
            child.terminate()  # the retrain job records its run as failed and frees the lease
        scheduler.shutdown(wait=False)

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, stop)
    first = extra.get("next_run_time") or trigger.get_next_fire_time(None, datetime.now(scheduler.timezone))
    log.info("scheduler started; first run at %s", first.isoformat(timespec="seconds"))
    try:
        scheduler.start()  # blocks until shutdown
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log.info("scheduler stopped after %d run(s)", runs)
    return runs


@contextmanager
def logging_to(log_file: str | Path | None = None) -> Iterator[logging.Logger]:
    """The scheduler's log on stderr (and appended to `log_file`), with timestamps, while the context lasts."""
    handlers = [logging.StreamHandler(sys.stderr)] + ([logging.FileHandler(log_file)] if log_file else [])
    for handler in handlers:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield log
    finally:
        for handler in handlers:
            log.removeHandler(handler)
            handler.close()


def schedule_retrain(
    database_url: str,
    model: str,
    config_path: str | Path,
    cron: str,
    timezone: str = "UTC",
    min_new: int | None = None,
    run_now: bool = False,
    max_runs: int | None = None,
    timeout: float | None = None,
    log_file: str | Path | None = None,
    described_url: str | None = None,
) -> int:
    """The `schedule` job: run `preflab retrain` on a cron schedule until stopped; returns the runs made.

    The config is read (and checked) now, so a broken one fails at once rather than at three in the morning.

    Args:
        described_url: the database as the log may show it (a password redacted).
    """
    from preflab.training.retrain.config import load_retrain_config

    load_retrain_config(config_path)
    trigger = cron_trigger(cron, timezone)
    with logging_to(log_file):
        log.info(
            "scheduling `preflab retrain --config %s` at %r (%s) on %s",
            config_path,
            cron,
            timezone,
            described_url or "the configured database",
        )
        job = retrain_job(database_url, model, str(config_path), min_new, timeout)
        return run_scheduler(trigger, job, timezone, max_runs, run_now)
