"""Where a generating command runs its model: the engine options, and the engine's costs in a summary.

Every command that generates takes `EngineConfig`'s options (`--engine`, `--api-base`,
`--concurrency`, `--timeout`, `--max-retries`, `--price-in`, `--price-out`) beside its own
`--model`, which on a server names the served model. `--engine` and `--api-base` default to
PREFLAB_ENGINE and OPENAI_BASE_URL (the fields' `envvar`), read here, never by the library.
The key is read from OPENAI_API_KEY by the engine itself, never from an option.
"""

from __future__ import annotations

from typing import Any

from preflab.commands.options import build_config, config_options
from preflab.console import plural
from preflab.lm.engines.config import EngineConfig, asked_a_server

# `--model` is each command's own (the model to load, or the served model's name).
engine_options = config_options(EngineConfig, exclude=("model",))


def engine_config(options: dict[str, Any], model: str | None) -> EngineConfig:
    """The engine the options name, for `model` (on a server: the served model's name)."""
    return build_config(EngineConfig, options, model=model)


def engine_line(stats: dict[str, Any] | None) -> str:
    """What a server was asked and what it cost, the one summary line of every command that asks one ("" when
    none was asked): `openai m: 120 requests (56 answered from the store), …`.

    In process nothing is paid for, retried or read back from the store: its tokens and
    seconds are in --json, and its summary line stays as it was. The cost is said where a
    price was given (a panel's is its members' added up).
    """
    if not asked_a_server(stats):
        return ""
    line = (
        f"{stats['engine']} {stats['model']}: {stats['requests']:,} requests "
        f"({stats['cache_hits']:,} answered from the store), {stats['tokens_in']:,} tokens in, "
        f"{stats['tokens_out']:,} out, {stats['retries']:,} retries, {stats['errors']:,} errors, "
        f"{stats['seconds']:.1f} s"
    )
    if stats.get("price_in") or stats.get("price_out") or stats.get("cost"):
        line += f", cost {stats['cost']:.4f}" + (f" {stats['currency']}" if stats.get("currency") else "")
    return line + lost_servers_text(stats)


def lost_servers_text(stats: dict[str, Any]) -> str:
    """`; 1 server stopped answering and the others went on: URL`, or nothing."""
    lost = stats.get("servers_lost") or []
    if not lost:
        return ""
    return f"; {plural(len(lost), 'server')} stopped answering and the others went on: {', '.join(lost)}"
