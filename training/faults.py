"""Failure injection for the long-running jobs, so a crash and a resume can be rehearsed.

Set `PREFLAB_FAIL_AT` to `JOB:STEP` or `JOB:STEP:ITERATION` (several joined by
commas) and the job raises `InjectedFailure` at that point, e.g.

    PREFLAB_FAIL_AT=self-reward:judge:1 preflab self-reward --iterations 2

stops iteration 1 right after its judgements are committed but before the loop
records the step as done: the worst moment for a crash. Running the same
command again without the variable must resume and finish. `retrain:train`
raises inside the trainer, after the training run was recorded.
"""

from __future__ import annotations

import os

from preflab.errors import PreflabError

ENV = "PREFLAB_FAIL_AT"


class InjectedFailure(PreflabError):
    """A failure asked for with PREFLAB_FAIL_AT (for rehearsing crashes and resumes)."""


def wanted(job: str, step: str, iteration: int | None = None) -> bool:
    for spec in os.environ.get(ENV, "").split(","):
        parts = spec.strip().split(":")
        if parts[:2] != [job, step]:
            continue
        if len(parts) == 2 or (iteration is not None and parts[2] == str(iteration)):
            return True
    return False


def fail_point(job: str, step: str, iteration: int | None = None) -> None:
    """Raise `InjectedFailure` when PREFLAB_FAIL_AT names this point."""
    if wanted(job, step, iteration):
        where = f"{job}:{step}" + ("" if iteration is None else f":{iteration}")
        raise InjectedFailure(f"injected failure at {where} ({ENV} is set)")


def trainer_callback(job: str, step: str = "train"):
    """A TrainerCallback that fails inside training when PREFLAB_FAIL_AT names `job:step`."""
    from transformers import TrainerCallback

    class FailInTraining(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            fail_point(job, step)

    return FailInTraining()
