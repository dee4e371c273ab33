"""`preflab demo …`: self-contained demonstrations with a known answer."""

from __future__ import annotations

import click

from preflab.console import LazyGroup

DEMOS: dict[str, str] = {
    "bon": "preflab.training.demos.bon:demo_command",
    "toy": "preflab.training.demos.toy:toy_command",
}


@click.group("demo", cls=LazyGroup, lazy=DEMOS)
def demo_group():
    """Self-contained demonstrations with a known answer.

    Example: preflab demo toy --json
    """
