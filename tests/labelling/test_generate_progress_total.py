"""Generation's progress counts candidates against the candidates needed: the total never changes under it
(issue 46, 1i: "generating: 0/24", then "25/25", when duplicates were sampled again).

The fault app's one-token replies are one of seven words, so four samples of a prompt often repeat one
another: the later rounds ask again, more asks than the first count, and the bar must not grow.
"""

from __future__ import annotations

import re

import pytest

from preflab.console import Reporter
from preflab.labelling.generation import GenerateConfig, run_generation
from preflab.lm.engines import EngineConfig
from tests.labelling.test_generate import write_prompts
from tests.lm.engines.conftest import fault_server, no_outside_server  # noqa: F401  (fixtures)
from tests.training.step_lines import stderr_is_a_log  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("stderr_is_a_log")
LINE = re.compile(r"generating: (\d+)/(\d+) \(\d+%\)")


def test_the_total_stays_what_was_needed_when_duplicates_are_sampled_again(sessions, fault_server, tmp_path, capsys):
    url, faults = fault_server()
    prompts = write_prompts(tmp_path / "prompts.jsonl", [f"Name a colour, number {k}." for k in range(6)])
    engine = EngineConfig(engine="openai", api_base=url, model="fault-model", concurrency=1)
    config = GenerateConfig(n=4, max_new_tokens=1, batch_size=1, max_rounds=3)
    summary = run_generation(
        sessions, "fault-model", config, prompts=prompts, engine=engine, reporter=Reporter(every=0)
    )
    assert summary.duplicates > 0 and faults.asked["chat"] > 24  # later rounds asked again, past the first count
    shown = [tuple(map(int, m.groups())) for m in map(LINE.match, capsys.readouterr().err.splitlines()) if m]
    assert shown and {total for _, total in shown} == {24}  # the candidates needed, however many asks it takes
    done = [d for d, _ in shown]
    assert done == sorted(done) and done[-1] == summary.stored <= 24
