"""A rich progress bar for transformers' Trainer, on stderr so stdout stays clean for --json."""

from __future__ import annotations

from transformers import TrainerCallback


class RichProgress(TrainerCallback):
    """Steps done, time left and the last logged loss; shown by the world's main process only."""

    def __init__(self, description: str = "training"):
        self.description = description
        self.progress = None
        self.task = None

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[loss]}"),
                                 console=Console(stderr=True), transient=True)
        self.progress.start()
        self.task = self.progress.add_task(self.description, total=state.max_steps, completed=state.global_step,
                                           loss="")

    def on_step_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.progress is not None and logs and "loss" in logs:
            self.progress.update(self.task, loss=f"loss {float(logs['loss']):.4f}")

    def on_train_end(self, args, state, control, **kwargs):
        self.close()

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
