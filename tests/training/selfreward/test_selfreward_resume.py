"""A self-rewarding iteration that crashes resumes at the step it reached, redoing nothing it committed.

Crashes are injected with PREFLAB_FAIL_AT (see `preflab.training.faults`): the
loop raises right after a step's work is committed and before the step is
recorded as done, the worst moment for a crash.
"""

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from preflab.cli import cli
from preflab.db.engine import open_database, session_factory
from preflab.db.models import Candidate, ModelVersion, Prompt, Ranking, SelfRewardIteration, TrainingRun
from tests.training.selfreward.selfreward_world import one_torch_thread, toy_base, toy_world  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


def counts(sessions) -> dict:
    def n(model, *where):
        return session.scalar(select(func.count()).select_from(model).where(*where))

    with sessions.begin() as session:
        row = session.scalars(select(SelfRewardIteration)).one()
        return {
            "step": row.step,
            "prompts": n(Prompt, Prompt.iteration == 1),
            "candidates": n(Candidate, Candidate.iteration == 1),
            "rankings": n(Ranking, Ranking.source == "judge"),
            "runs": n(TrainingRun),
            "policies": n(ModelVersion, ModelVersion.kind == "policy"),
        }


def test_a_crashed_iteration_resumes_at_the_step_it_reached(sqlite_url, toy_world, monkeypatch):
    sessions = session_factory(open_database(sqlite_url))
    args = [
        "--database-url",
        sqlite_url,
        "self-reward",
        "--iterations",
        1,
        *toy_world.loop_args(prompts_per_iteration=48),
    ]
    args = [str(a) for a in args]

    monkeypatch.setenv("PREFLAB_FAIL_AT", "self-reward:judge:1")
    crashed = CliRunner().invoke(cli, args)
    assert crashed.exit_code == 1
    assert "Error: injected failure at self-reward:judge:1" in crashed.output
    after_judge = counts(sessions)
    # The judgements were committed; the step was not recorded as done.
    assert after_judge["step"] == "judge" and after_judge["prompts"] == 48
    assert after_judge["rankings"] == 48 and after_judge["runs"] == 0

    # Again, now crashing once DPO has trained and recorded its run, before the loop records the step.
    monkeypatch.setenv("PREFLAB_FAIL_AT", "self-reward:train:1")
    crashed = CliRunner().invoke(cli, args)
    assert crashed.exit_code == 1 and "injected failure at self-reward:train:1" in crashed.output
    after_train = counts(sessions)
    assert after_train["step"] == "train" and after_train["runs"] == 1 and after_train["policies"] == 1
    # Resuming at the judge step re-judged nothing and sampled nothing new.
    assert {k: after_train[k] for k in ("prompts", "candidates", "rankings")} == {
        k: after_judge[k] for k in ("prompts", "candidates", "rankings")
    }
    assert "48 prompts (48 already ranked)" in crashed.output

    # Resuming needs no settings: the bare command continues with those the iteration started with.
    monkeypatch.delenv("PREFLAB_FAIL_AT")
    finished = CliRunner().invoke(
        cli, ["--database-url", sqlite_url, "self-reward", "--iterations", "1"], catch_exceptions=False
    )
    assert finished.exit_code == 0, finished.output
    final = counts(sessions)
    # The training run that finished before the crash was adopted, not repeated.
    assert final == {**after_train, "step": "done"}
    with sessions.begin() as session:
        row = session.scalars(select(SelfRewardIteration)).one()
        run = session.scalars(select(TrainingRun)).one()
        policy = session.get(ModelVersion, row.model_version_id)
        assert (run.status, run.iteration, run.output_model_version_id) == ("succeeded", 1, policy.id)
        assert (policy.parent_id, policy.iteration) == (row.policy_id, 1)
        assert row.metrics["eval"]["prompts"] == 20 and row.finished_at is not None
        assert row.metrics["eval"]["judge"] == "reward-model" and row.config["loop"]["n"] == 6
        assert row.config["dpo"]["loss_type"] == "sigmoid,sft"
