"""The progress lines a training run writes to a stderr that is no terminal (a log file, a scheduler).

from tests.training.step_lines import CLOCK, step_lines, stderr_is_a_log
"""

from __future__ import annotations

import re

import pytest

# Every form `preflab.training.progress.clock` prints: `42s`, `1m 05s`, `1h 02m`.
CLOCK = r"(?:\d+s|\d+m \d{2}s|\d+h \d{2}m)"


def step_line(run: str, step: int, steps: int, left: str = CLOCK) -> str:
    """The pattern of the line `training KIND run ID: step N/M, loss …, … elapsed, about … left`."""
    return rf"training {run}: step {step}/{steps}, loss \d+\.\d{{4}}, {CLOCK} elapsed, about {left} left"


def step_lines(stderr: str, run: str) -> list[str]:
    """The lines of one run (`run` is e.g. "reward run 1")."""
    return [line for line in stderr.splitlines() if line.startswith(f"training {run}:")]


def matches(pattern: str, line: str) -> bool:
    return re.fullmatch(pattern, line) is not None


@pytest.fixture
def stderr_is_a_log(monkeypatch):
    """CliRunner's stderr is no terminal: keep rich agreeing whatever the environment forces."""
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
