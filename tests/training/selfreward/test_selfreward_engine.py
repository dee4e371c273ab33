"""The self-rewarding loop's generation steps on a server: M_0 writes prompts and samples candidates there.

Against the fault-injecting app (tests/fault_app.py), serving M_0 under its model version's name,
on SQLite and Postgres. The candidates are stored under M_0's own name, as the judge and pairs
steps read them, and say which engine drew them; a step run again asks nothing it asked before.
"""

from __future__ import annotations

import json

from sqlalchemy import delete, select

from preflab.console import SILENT
from preflab.db.models import Candidate, Prompt, SelfRewardIteration
from tests.lm.engines.conftest import fault_server, no_outside_server  # noqa: F401 (fixtures)

EXAMPLES = [
    "What is the capital of France?",
    "How many legs does a spider have?",
    "Write a short poem about the sea.",
    "Name three primary colours.",
    "Explain why the sky is blue.",
]


def served_loop(cli, sessions, url: str, tmp_path):
    """Iteration 1 of a loop whose M_0 the fault app at `url` serves: (its row id, `run(step)`)."""
    from preflab.lm.engines import EngineConfig
    from preflab.lm.names import ModelCache
    from preflab.training.selfreward.config import SelfRewardConfig
    from preflab.training.selfreward.loop import _next_iteration
    from preflab.training.selfreward.state import load_context
    from preflab.training.selfreward.steps import STEP_FUNCTIONS

    examples = tmp_path / "examples.jsonl"
    examples.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in EXAMPLES), encoding="utf-8")
    cli("import", "prompts", examples)
    config = SelfRewardConfig(
        model="fault-model", prompts_per_iteration=4, shots=3, n=2, max_new_tokens=8, judge="likelihood", eval_limit=0
    )
    engine = EngineConfig(engine="openai", api_base=url, model="fault-model")
    row_id = _next_iteration(sessions, config, {}, 1, "served", str(tmp_path / "loop"))

    def run(step: str) -> None:
        ctx = load_context(sessions, row_id)
        ctx.engine = engine
        STEP_FUNCTIONS[step](sessions, ctx, ModelCache(), SILENT)

    return row_id, run


def test_m0_on_a_server_writes_the_prompts_and_samples_the_candidates(cli, sessions, fault_server, tmp_path):
    from preflab.training.selfreward.loop import iteration_summary

    url, faults = fault_server()
    row_id, run = served_loop(cli, sessions, url, tmp_path)

    run("prompts")
    written = faults.asked["chat"]
    # Five asked for four (a quarter more, for replies that repeat or cannot be used), each showing 3 examples.
    assert written == 5
    shown = [json.loads(body)["messages"] for body in faults.bodies]
    assert all(len(m) == 1 and m[0]["role"] == "user" and m[0]["content"].count("Task ") == 3 for m in shown)
    run("candidates")
    with sessions.begin() as session:
        prompts = session.scalars(select(Prompt.id).where(Prompt.iteration == 1)).all()
        candidates = session.scalars(select(Candidate).where(Candidate.iteration == 1)).all()
        metrics = session.get(SelfRewardIteration, row_id).metrics
    assert len(prompts) == 4 and len(candidates) == 8
    assert {c.model for c in candidates} == {"fault-model"}
    assert {c.sampling["engine"] for c in candidates} == {"openai:fault-model"}
    assert faults.asked["chat"] == written + 8
    assert metrics["engine_prompts"]["requests"] == 5 and metrics["engine_candidates"]["requests"] == 8
    summary = iteration_summary(sessions, row_id)
    assert summary["engine"]["candidates"]["tokens_out"] == 8 * 8 and summary["candidates"] == 8

    # The step again, its candidates gone: every answer is read back from the store, none paid for twice.
    with sessions.begin() as session:
        session.execute(delete(Candidate).where(Candidate.iteration == 1))
        session.get(SelfRewardIteration, row_id).step = "candidates"
    run("candidates")
    with sessions.begin() as session:
        assert len(session.scalars(select(Candidate).where(Candidate.iteration == 1)).all()) == 8
        metrics = session.get(SelfRewardIteration, row_id).metrics
    assert faults.asked["chat"] == written + 8
    assert (metrics["engine_candidates"]["requests"], metrics["engine_candidates"]["cache_hits"]) == (0, 8)
