"""The suite cannot pass on one run and fail on the next: property tests draw the same examples."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import settings

from tests.properties import PROFILE

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out


def test_property_tests_are_derandomised_without_an_example_database():
    assert PROFILE == "deterministic"  # what `make test` and CI load (`make fuzz` selects only -m property)
    assert settings.default.derandomize is True
    assert settings.default.database is None


def test_two_runs_draw_the_same_examples(tmp_path):
    """The same property test, run in two fresh processes, sees the same values in the same order."""
    (tmp_path / "conftest.py").write_text("import tests.properties  # noqa: F401\n")
    (tmp_path / "test_draws.py").write_text(
        textwrap.dedent("""
        from hypothesis import given, strategies as st

        @given(st.text(), st.integers())
        def test_draws(text, number):
            with open("draws.txt", "a", encoding="utf-8") as out:
                out.write(repr((text, number)) + "\\n")
    """)
    )
    root = Path(__file__).resolve().parents[1]
    draws = []
    for _run in range(2):
        (tmp_path / "draws.txt").unlink(missing_ok=True)
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_draws.py"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        )
        assert result.returncode == 0, result.stdout + result.stderr
        draws.append((tmp_path / "draws.txt").read_text(encoding="utf-8"))
    assert draws[0] == draws[1] and draws[0].count("\n") >= 50
