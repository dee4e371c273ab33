"""A training run shorter than one logging interval still says each of its steps in a log."""

import json

import pytest
from click.testing import CliRunner

from preflab.cli import cli
from tests.toy_data import load_toy_rankings, one_thread, toy_base  # noqa: F401 (fixtures)
from tests.training.step_lines import matches, stderr_is_a_log, step_line, step_lines  # noqa: F401

pytestmark = pytest.mark.slow


@pytest.mark.usefixtures("stderr_is_a_log")
def test_a_five_step_run_under_the_default_logging_interval_says_each_step(db_url, sessions, toy_base, tmp_path):
    # `train reward --max-steps 5` logs every 10 steps by default: a log file showed no step at all.
    load_toy_rankings(sessions, toy_base, tmp_path / "toy", prompts=24)
    result = CliRunner().invoke(
        cli,
        [
            "--database-url",
            db_url,
            "train",
            "reward",
            "--model",
            str(toy_base),
            "--max-steps",
            "5",
            "--per-device-train-batch-size",
            "4",
            "--max-length",
            "16",
            "--use-cpu",
            "--seed",
            "0",
            "--json",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    lines = step_lines(result.stderr, "reward run 1")
    assert lines[0] == "training reward run 1: 5 steps"
    assert len(lines) == 6, result.stderr
    for step, line in enumerate(lines[1:], start=1):
        assert matches(step_line("reward run 1", step, 5, **({"left": "0s"} if step == 5 else {})), line), line
    # Each step's loss was logged, so the summary has a first and a last loss.
    metrics = json.loads(result.stdout)["metrics"]
    assert metrics["global_step"] == 5 and metrics["first_loss"] is not None and metrics["last_loss"] is not None
