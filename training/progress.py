"""What a training run shows on stderr (stdout stays clean for --json): its progress, and no library chatter.

On a terminal the progress is a rich bar. Anywhere else (a log file, a scheduler,
`preflab retrain --json > out.json 2> log` under cron) a bar shows nothing until the
end, so the run says one line per logging step instead, with or without --json:

    training reward run 3: step 20/45, loss 0.6412, 1m 05s elapsed, about 1m 21s left

A run shorter than one logging interval (5 steps, `--logging-steps 10`) would say no
step at all: it says each of its steps instead.

Importing this module imports neither transformers nor torch (`preflab --help` reaches it).
"""

from __future__ import annotations

import os
import time
import warnings
from contextlib import contextmanager

from preflab.console import Reporter, clock

__all__ = ["clock", "quiet_libraries", "training_progress"]


def training_progress(description: str, reporter: Reporter):
    """A TrainerCallback showing steps done, time left and the last logged loss (the world's main process only).

    A bar on a terminal, a line per logging step elsewhere (`Reporter.steps`): under `--json` too.
    """
    from transformers import TrainerCallback

    class TrainingProgress(TrainerCallback):
        def __init__(self):
            self.bar = self.task = None
            self.lines = False
            self.started, self.first_step = 0.0, 0

        def on_train_begin(self, args, state, control, **kwargs):
            if not state.is_world_process_zero:
                return
            self.started, self.first_step = time.monotonic(), state.global_step
            shown = reporter.steps()
            if shown == "lines":
                self.lines = True
                resumed = f", resuming after step {state.global_step:,}" if state.global_step else ""
                reporter.step(f"{description}: {state.max_steps:,} steps{resumed}")
            if shown != "bar":
                return
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[loss]}"),
                console=Console(stderr=True),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task(description, total=state.max_steps, completed=state.global_step, loss="")

        def on_step_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.update(self.task, completed=state.global_step)
            if self.lines and self.short(args, state):
                if args.world_size == 1:
                    control.should_log = True  # the loss of this step comes to on_log
                else:  # a log gathers the loss from every process, and only this one holds the callback
                    reporter.step(self.line(state, None))

        def short(self, args, state) -> bool:
            """Whether the run ends before its first logging step: then each step is said."""
            every = getattr(state, "logging_steps", None) or args.logging_steps
            return args.logging_strategy == "steps" and state.max_steps < every

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "loss" not in logs:
                return
            if self.bar is not None:
                self.bar.update(self.task, loss=f"loss {float(logs['loss']):.4f}")
            elif self.lines:
                reporter.step(self.line(state, float(logs["loss"])))

        def line(self, state, loss: float | None) -> str:
            elapsed, done = time.monotonic() - self.started, state.global_step - self.first_step
            left = f", about {clock(elapsed / done * (state.max_steps - state.global_step))} left" if done else ""
            shown = "" if loss is None else f", loss {loss:.4f}"
            return (
                f"{description}: step {state.global_step:,}/{state.max_steps:,}{shown}, {clock(elapsed)} elapsed{left}"
            )

        def on_train_end(self, args, state, control, **kwargs):
            self.close()

        def close(self) -> None:
            if self.bar is not None:
                self.bar.stop()
                self.bar = None

    return TrainingProgress()


@contextmanager
def quiet_libraries(progress: bool = True):
    """Keep library chatter (weight-loading bars, dataset map bars, warnings) off the terminal.

    TRL's bar for precomputing reference log-probabilities stays when `progress`
    is on: it can be a long step of its own.
    """
    import datasets
    from transformers.utils import logging as hf_logging

    bars, verbosity = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    datasets_bars = datasets.is_progress_bar_enabled()
    tqdm = os.environ.get("TQDM_DISABLE")
    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    if not progress:
        os.environ["TQDM_DISABLE"] = "1"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()
        if datasets_bars:
            datasets.enable_progress_bars()
        hf_logging.set_verbosity(verbosity)
        if tqdm is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = tqdm
