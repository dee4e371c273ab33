"""What prints while a job runs: progress bars, step lines and notes on stderr, and counted nouns.

This module sits at the bottom with `settings`, `errors` and `files`: it imports click and
rich, never a preflab layer, so every library job can take a `Reporter` and say `plural`.
The click machinery every command shares (options made from configs, `--json`, the lazy
group, what `-v` does) is the shell's: `preflab.commands.options`.

- `Reporter`: how a long job reports progress and notes (silent by default).
- `plural`, `clock`: `3 tasks`, `8m 31s`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click


def plural(n: int, noun: str, plural_noun: str | None = None) -> str:
    """`1 task`, `3 tasks`, `1,204 rankings`."""
    return f"{n:,} {noun if n == 1 else plural_noun or noun + 's'}"


# --- progress and notes ------------------------------------------------------------------


class Reporter:
    """How a long job says what it is doing: progress bars, step lines and one-line notes on stderr.

    Library jobs take one (`reporter: Reporter = SILENT`) instead of loose
    `log`/`bar`/`progress` callbacks. Bars appear only on a terminal, never in
    logs, pipes or CI; notes appear whenever the reporter is enabled. A job whose
    steps take minutes (training) says each step as a line where stderr is not a
    terminal: `Reporter(not as_json)` says them under `--json` too (they go to
    stderr; stdout stays one JSON document), which is how a scheduler or cron runs
    it (`--json > out.json 2> log`). Only `step_lines=False` (SILENT) keeps them back.
    A note a disabled reporter keeps off the terminal is a log record at INFO instead,
    which the root `--verbose` shows (`preflab.commands.options.log_to_stderr`). A progress bar is a line every
    `every` seconds there instead (`make run > log` was silent for minutes while generating),
    and a closing line if it said any.
    """

    def __init__(self, enabled: bool = True, *, step_lines: bool = True, every: float = 10.0):
        self.enabled = enabled
        self.step_lines = step_lines
        self.every = every

    def note(self, message: str) -> None:
        """One line on stderr (stdout stays clean for `--json`)."""
        if self.enabled:
            click.echo(message, err=True)
        else:
            log.info("%s", message)

    def steps(self) -> str | None:
        """How a long job shows its steps now: "bar" (a terminal), "lines" (a log file, a pipe) or None."""
        if _stderr_is_terminal():
            return "bar" if self.enabled else None
        return "lines" if self.step_lines else None

    def step(self, message: str) -> None:
        """One step line on stderr, when `steps()` is "lines" (under `--json` too)."""
        if self.steps() == "lines":
            click.echo(message, err=True)

    @contextmanager
    def progress(self, description: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
        """A progress bar, or step lines where stderr is no terminal; the context yields `advance(n)`."""
        from rich.console import Console

        console = Console(stderr=True)
        if not console.is_terminal and self.step_lines:
            lines = _ProgressLines(description, total, self.every)
            try:
                yield lines.advance
            finally:
                lines.close()
            return
        if not self.enabled or not console.is_terminal:
            yield lambda n: None
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as bar:
            task = bar.add_task(description, total=total)
            yield lambda n: bar.advance(task, n)


def clock(seconds: float) -> str:
    """`42s`, `8m 31s`, `1h 02m`."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


class _ProgressLines:
    """A progress bar as lines for a log: `generating: 24/96 (25%), 1m 05s elapsed, about 3m 15s left`.

    One line once `every` seconds have passed since the start or the last line, so a
    log gets a few lines a minute however small the steps, and a step that takes minutes
    (a batch of generation) is not silent: a daemon thread says the line when no step
    has. A job done sooner says nothing, and one that said something says its end.
    """

    def __init__(self, description: str, total: int | None, every: float):
        self.description, self.total, self.every = description, total, every
        self.done = 0
        self.started = self.last = time.monotonic()
        self.said: int | None = None  # how many were done at the last line said
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        if every > 0:
            threading.Thread(target=self._beat, daemon=True, name="progress-lines").start()

    def _beat(self) -> None:
        while not self.stopped.wait(self.every / 4):
            self.advance(0)

    def advance(self, n: int) -> None:
        with self.lock:
            self.done += n
            now = time.monotonic()
            if now - self.last >= self.every and not self.stopped.is_set():
                self.last = now
                self._say(self.line(now))

    def close(self) -> None:
        self.stopped.set()
        with self.lock:
            if self.said is not None and self.said != self.done:
                self._say(self.line(time.monotonic(), end=True))

    def _say(self, line: str) -> None:
        self.said = self.done
        click.echo(line, err=True)

    def line(self, now: float, end: bool = False) -> str:
        elapsed = now - self.started
        if not self.total:
            return f"{self.description}: {self.done:,} done, {clock(elapsed)} elapsed"
        total = max(self.total, self.done)  # a job may find more to do than it first counted (another round)
        share = f"{self.done:,}/{total:,} ({self.done / total:.0%})"
        left = total - self.done
        if end or not self.done or left <= 0:
            return f"{self.description}: {share}, {clock(elapsed)} elapsed"
        return f"{self.description}: {share}, {clock(elapsed)} elapsed, about {clock(elapsed / self.done * left)} left"


def _stderr_is_terminal() -> bool:
    from rich.console import Console

    return Console(stderr=True).is_terminal


SILENT = Reporter(enabled=False, step_lines=False)
log = logging.getLogger("preflab")
