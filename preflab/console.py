"""What every command shares: JSON output, progress on stderr, options made from configs.

This module sits at the bottom with `settings`, `errors` and `files`: it imports click and
rich, never a preflab layer, so library jobs can take a `Reporter` and every
command module can build its options here.

- `Reporter`: how a long job reports progress and notes (silent by default).
- `log_to_stderr`: what the root `--verbose` does, for every command alike.
- `config_options` / `build_config`: one click option per field of a config
  dataclass, with the field's help, default and choices; and the config back.
- `json_option`, `echo_json`, `pass_settings`: the shared `--json` and settings.
- `LazyGroup`: a click group whose subcommands are imported on first use.
- `DefaultGroup`: a click group with a default subcommand (`self-reward` is `self-reward run`).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import sys
import threading
import time
import types
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from preflab.errors import PreflabError
from preflab.settings import Settings

pass_settings = click.make_pass_decorator(Settings)

json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print the result as one JSON document instead of text."
)


def echo_json(data: Any) -> None:
    """Print one JSON document (for `--json`)."""
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


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
    which the root `--verbose` shows (`log_to_stderr`). A progress bar is a line every
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


class _ClickStderr(logging.Handler):
    """Each record on the stderr click writes to now (a `CliRunner` swaps it on every run).

    A record its own logger already writes to stderr (the scheduler's log) is not written twice.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        logger = logging.getLogger(record.name)
        while logger.parent is not None:  # up to, not including, the root logger
            if any(getattr(h, "stream", None) is sys.stderr for h in logger.handlers):
                return False
            logger = logger.parent
        return super().filter(record)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            click.echo(self.format(record), err=True)
        except Exception:  # a log line must never fail the command: logging reports it instead
            self.handleError(record)


# At INFO, SQLAlchemy prints every statement with its parameters and alembic each plugin it loads.
_QUIET = ("sqlalchemy", "alembic.runtime.plugins")


def log_to_stderr(ctx: click.Context) -> None:
    """`preflab -v`: every log record at INFO and above on stderr until `ctx` closes.

    That is preflab's own (a command's notes under `--json` included: see `Reporter`),
    HTTP requests (httpx) and migrations (alembic); the loggers in `_QUIET` stay at WARNING.
    """
    root = logging.getLogger()
    quiet = [logging.getLogger(name) for name in _QUIET]
    levels = [(logger, logger.level) for logger in (root, *quiet)]
    handler = _ClickStderr(logging.INFO)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    if root.getEffectiveLevel() > logging.INFO:
        root.setLevel(logging.INFO)
    for logger in quiet:
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)

    def restore() -> None:
        root.removeHandler(handler)
        for logger, level in levels:
            logger.setLevel(level)

    ctx.call_on_close(restore)


# --- options made from config dataclasses -------------------------------------------------

CLICK_TYPES = {int: click.INT, float: click.FLOAT, str: click.STRING}
C = TypeVar("C")


def _base_type(hint) -> type:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0]
    return hint


def config_fields(config_cls, exclude: tuple[str, ...] = ()) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(config_cls) if f.init and f.name not in exclude]


def config_options(
    config_cls, *, exclude: tuple[str, ...] = (), prefix: str = "", defaults: dict[str, Any] | None = None
):
    """Add one click option per field of a config dataclass: `--field-name`, with its help.

    A field's metadata may carry `help`, `choices` (a click.Choice), `flags`
    (extra short flags such as `-n`), `metavar` (`K/N`) and `multiple` (a repeatable option).
    `bool` fields become `--x/--no-x`. With
    `prefix`, options are `--PREFIX-field-name` (two configs in one command);
    `defaults` overrides a field's default for this command only. Read the
    config back with `build_config`.
    """
    hints = typing.get_type_hints(config_cls)
    defaults = defaults or {}

    def decorate(func):
        for f in reversed(config_fields(config_cls, exclude)):
            base = _base_type(hints[f.name])
            name = f"{prefix}{f.name}"
            flag = "--" + name.replace("_", "-")
            if f.name in defaults:
                default = defaults[f.name]
            elif f.default is not dataclasses.MISSING:
                default = f.default
            else:
                default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
            kwargs = {"default": default, "help": f.metadata.get("help"), "show_default": default is not None}
            if "metavar" in f.metadata:
                kwargs["metavar"] = f.metadata["metavar"]
            if base is bool:
                func = click.option(f"{flag}/--no-{flag[2:]}", name, **kwargs)(func)
                continue
            if f.metadata.get("multiple"):  # repeatable: the config gets a tuple of the values given
                kwargs.update(multiple=True, default=None, show_default=False)
            kind = click.Choice(list(f.metadata["choices"])) if "choices" in f.metadata else CLICK_TYPES[base]
            func = click.option(*f.metadata.get("flags", ()), flag, name, type=kind, **kwargs)(func)
        return func

    return decorate


def build_config(config_cls: type[C], options: dict[str, Any], *, prefix: str = "", **overrides) -> C:
    """The config whose fields `config_options` added, taken (and removed) from `options`."""
    values = {}
    for f in config_fields(config_cls):
        key = f"{prefix}{f.name}"
        if key in options:
            values[f.name] = options.pop(key)
    return config_cls(**{**values, **overrides})


# --- the lazy group -----------------------------------------------------------------------


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use.

    `lazy` maps a name to "module:attribute"; `summaries` gives the one-line help
    shown by `--help` without importing the module (a test holds each summary equal
    to the command's own first docstring line).
    """

    def __init__(self, *args, lazy: dict[str, str] | None = None, summaries: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})
        self.summaries = dict(summaries or {})

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx, name):
        if name in self.lazy:
            module, attr = self.lazy[name].split(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)

    def format_commands(self, ctx, formatter):
        rows = []
        for name in self.list_commands(ctx):
            if name in self.summaries:
                rows.append((name, self.summaries[name]))
            else:
                cmd = self.get_command(ctx, name)
                if cmd is not None and not cmd.hidden:
                    rows.append((name, cmd.get_short_help_str(formatter.width)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except PreflabError as exc:
            raise click.ClickException(str(exc)) from None


class DefaultGroup(click.Group):
    """A click group that runs its `default` subcommand when none is named.

    As llm's `keys` group does (with click-default-group): `preflab self-reward
    --iterations 3` is `preflab self-reward run --iterations 3`, and the group
    itself carries no options. With no arguments, or an option first (other than
    `--help`, the group's own), the default runs; an unknown word stays "No such command".
    """

    def __init__(self, *args, default: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.default = default

    def parse_args(self, ctx, args):
        if not args or (args[0].startswith("-") and args[0] not in ctx.help_option_names):
            args = [self.default, *args]
        return super().parse_args(ctx, args)
