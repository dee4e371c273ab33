"""What every command shares: options made from config dataclasses, `--json`, the settings, the groups.

The shell's click machinery, beside the commands that use it (the library below never imports it;
what a job prints while it runs is `preflab.console`'s `Reporter`).

- `config_options` / `build_config`: one click option per field of a config
  dataclass, with the field's help, default and choices; and the config back.
- `json_option`, `echo_json`, `pass_settings`: the shared `--json` and settings; `echo_result`:
  how a command ends (with `--json` the result, else its summary).
- `log_to_stderr`: what the root `--verbose` does, for every command alike.
- `LazyGroup`: a click group whose subcommands are imported on first use; it turns a preflab error into
  one line (naming the shard a run works on: `name_shard`).
- `DefaultGroup`: a click group with a default subcommand (`self-reward` is `self-reward run`).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import sys
import types
import typing
from collections.abc import Callable, Iterable
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


def echo_result(as_json: bool, data: Any, text: Callable[[], str], notes: Iterable[str] = ()) -> None:
    """How a command ends, once it has called its job: with `--json`, the result as one JSON document;
    else its summary, `text()` (nothing when empty), then each of `notes` as a line on stderr (a hint:
    where to see what was quarantined; a warning).

    `text` is called only without `--json`: a summary may read what only the text needs.
    """
    if as_json:
        echo_json(data)
        return
    if said := text():
        click.echo(said)
    for note in notes:
        click.echo(note, err=True)


# --- what -v does ---------------------------------------------------------------------


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
    (extra short flags such as `-n`), `metavar` (`K/N`), `envvar` (the environment variable a
    default is read from) and `multiple` (a repeatable option).
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
            if "envvar" in f.metadata:  # the default read from the environment, as the root group's are
                kwargs["envvar"] = f.metadata["envvar"]
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

SHARD = "preflab.shard"  # in the context's meta (shared by every command of a run): the `--shard K/N` it works on


def name_shard(shard: str | None) -> None:
    """Have this run's error line name its shard (`shard 1/3: …`): of an array's N logs, the failed one says which."""
    if shard is not None:
        click.get_current_context().meta[SHARD] = shard


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
            shard = ctx.meta.get(SHARD)
            raise click.ClickException(f"shard {shard}: {exc}" if shard else str(exc)) from None


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
