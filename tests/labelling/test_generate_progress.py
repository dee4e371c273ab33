"""`make run > log`: where stderr is no terminal, generation, judging and imports say their progress in lines.

A bar shows nothing in a log file, so `preflab pipeline > log` was silent for 3.5
minutes while generating. The lines come at most once per `Reporter.every`
seconds (10 by default), also while one step runs long, with a closing line from a job that said anything.
"""

from __future__ import annotations

import re
import time

import pytest
from sqlalchemy import func, select

from preflab.console import Reporter, clock
from preflab.db.models import Candidate
from preflab.labelling.generation import GenerateConfig, run_generation
from preflab.labelling.pipeline import PipelineConfig, run_pipeline, sample_rankings_path
from tests.labelling.test_generate import write_prompts
from tests.tiny_models import tiny_causal_lm
from tests.training.step_lines import CLOCK, stderr_is_a_log  # noqa: F401 (fixture)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("stderr_is_a_log"),
]  # measured at a second or more a test: `make check` leaves it out


def progress(description: str, done: int, total: int, left: bool = True) -> str:
    """The pattern of `generating: 3/8 (38%), 2s elapsed, about 3s left`."""
    share = rf"{done}/{total} \({round(100 * done / total)}%\)"
    return rf"{re.escape(description)}: {share}, {CLOCK} elapsed" + (rf", about {CLOCK} left" if left else "")


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    return tiny_causal_lm(tmp_path_factory.mktemp("models") / "tiny-lm")


def test_the_pipeline_says_each_jobs_progress_in_a_log(sessions, tiny_lm, tmp_path, capsys):
    prompts = write_prompts(tmp_path / "prompts.jsonl")
    config = PipelineConfig(prompts=str(prompts), max_prompts=3, out=str(tmp_path / "out"))
    report = run_pipeline(
        sessions, str(tiny_lm), config, GenerateConfig(n=2, max_new_tokens=4, batch_size=2), Reporter(every=0)
    )  # a line at every step: the test cannot wait 10 s between them
    assert report["generate"]["stored"] == 6
    lines = capsys.readouterr().err.splitlines()
    assert f"pipeline: generating candidates for up to 3 prompts with {tiny_lm}" in lines
    assert "pipeline: ranking every prompt's candidates with the likelihood judge" in lines
    generating = [line for line in lines if line.startswith("generating:")]
    # Three batches of two candidates; the last line says the end, so no closing line repeats it.
    assert [
        re.fullmatch(progress("generating", done, 6, left=done < 6), line) is not None
        for done, line in zip((2, 4, 6), generating)
    ] == [True] * 3, generating
    assert len(generating) == 3
    rows = len(sample_rankings_path().read_text(encoding="utf-8").splitlines())
    importing = [line for line in lines if line.startswith("importing rankings.jsonl:")]
    assert importing and re.fullmatch(progress("importing rankings.jsonl", rows, rows, left=False), importing[-1])
    judging = [line for line in lines if line.startswith("judging (")]
    ranked = report["judge"]["ranked"]
    assert judging and re.fullmatch(progress("judging (likelihood)", ranked, ranked, left=False), judging[-1])
    with sessions.begin() as session:  # what the lines counted is what was stored
        assert (
            session.scalar(select(func.count()).select_from(Candidate).where(Candidate.model == str(tiny_lm.resolve())))
            == 6
        )


def test_lines_are_few_a_job_done_within_the_interval_says_nothing(sessions, tiny_lm, tmp_path, capsys):
    prompts = write_prompts(tmp_path / "prompts.jsonl")
    every = 0.2
    start = time.monotonic()
    summary = run_generation(
        sessions,
        str(tiny_lm),
        GenerateConfig(n=4, max_new_tokens=16, batch_size=1),
        prompts=prompts,
        reporter=Reporter(every=every),
    )
    elapsed = time.monotonic() - start
    samples = summary.stored + summary.duplicates + summary.empty
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("generating:")]
    # A sample at a time, but at most one line per 0.2 s, and the closing line.
    assert samples >= 12 and len(lines) <= elapsed / every + 1, (samples, elapsed, lines)
    assert elapsed < 2 * every or len(lines) >= 2  # a line, then the closing one

    run_generation(
        sessions,
        str(tiny_lm),
        GenerateConfig(n=5, max_new_tokens=4, batch_size=8),
        prompts=prompts,
        reporter=Reporter(every=3600),
    )
    assert [line for line in capsys.readouterr().err.splitlines() if line.startswith("generating")] == []


def test_a_silent_reporter_says_nothing(sessions, tiny_lm, tmp_path, capsys):
    prompts = write_prompts(tmp_path / "prompts.jsonl")
    run_generation(sessions, str(tiny_lm), GenerateConfig(n=1, max_new_tokens=4), prompts=prompts)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("seconds, shown", [(0, "0s"), (65, "1m 05s"), (3725, "1h 02m")])
def test_the_lines_clock(seconds, shown):
    assert clock(seconds) == shown


def test_a_long_step_is_not_silent_and_a_second_round_does_not_pass_100_percent(capsys):
    # One batch of generation took 3.5 minutes: the lines go on while no step ends.
    with Reporter(every=0.1).progress("generating", 2) as advance:
        time.sleep(0.45)
        advance(3)  # a second round found one more to make than first counted
    lines = capsys.readouterr().err.splitlines()
    waiting = [line for line in lines if re.fullmatch(progress("generating", 0, 2, left=False), line)]
    assert len(waiting) >= 2, lines
    assert re.fullmatch(progress("generating", 3, 3, left=False), lines[-1]), lines
