"""The training methods, in one table: what `train`, retrain, self-reward and the demos run.

A method is its config dataclass (the `train NAME` options, the keys of a retrain
section, what a run stores), the trainer it builds for a planned run, the model
class its result is saved as, the held-out evaluation of that saved model, and
what it adds to the training summary. `runs.execute` runs every method the same
way: plan, train, save, evaluate, record. Adding a method is one file (its config,
trainer and evaluation) and one entry in `METHODS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.files import open_to_umask
from preflab.training import dpo, pair_ranker, reward, rl, simpo
from preflab.training.config import DPOTrainConfig, RewardTrainConfig
from preflab.training.runs import RunPlan, RunResult, execute, is_main_process


@dataclass(frozen=True)
class Method:
    """One way to train a model, and everything a caller needs to run it."""

    name: str  # the command (`train NAME`), the runs' kind and, with `retrain`, the retrain section [NAME]
    config: type  # its config dataclass: the options, the stored config
    build: Callable[[RunPlan, Any], Any]  # the transformers/TRL trainer of a planned run (every rank)
    model_class: str  # the transformers auto class the trained model is saved as (LoRA merged in)
    model_kind: str  # the model version a run makes: reward, policy or pair-ranker
    evaluate: Callable[[RunPlan, Any, sessionmaker[Session] | None], dict[str, Any]]  # held-out metrics (rank 0)
    help: str  # the `train NAME` command's help
    finish: Callable[[Any, RunPlan, Any], dict[str, Any]] | None = None  # once saved: the method's own numbers
    prepare: Callable[[sessionmaker[Session], Any], Any] | None = None  # rank 0, before a new run: its config
    run_kind: Callable[[Any], str] | None = None  # the runs' kind, where the config picks it
    retrain: bool = False  # a section of the retrain config

    def kind(self, config) -> str:
        """What its runs are recorded (and resumed) as."""
        return self.name if self.run_kind is None else self.run_kind(config)

    def criteria(self, config) -> list[str]:
        """The criteria whose pairs a run trains on (`preflab.training.criteria`); `[]`: any dataset version."""
        return list(getattr(config, "data_criteria", ()))

    def fit(self, plan: RunPlan, config, callbacks: Sequence = (), reporter: Reporter = SILENT) -> dict[str, Any]:
        """Train (every rank), save the final model to `plan.model_dir`, and return the training numbers."""
        import transformers

        trainer = self.build(plan, config)
        output = run_trainer(trainer, plan, callbacks, reporter)
        save_final(trainer, plan, getattr(transformers, self.model_class))
        summary = training_summary(trainer, output)
        if self.finish is not None:
            summary.update(self.finish(trainer, plan, config))
        return summary


METHODS: dict[str, Method] = {
    method.name: method
    for method in (
        Method(
            "reward",
            RewardTrainConfig,
            build=reward.build_reward_trainer,
            model_class="AutoModelForSequenceClassification",
            model_kind="reward",
            evaluate=reward.evaluate_run,
            run_kind=reward.run_kind,
            retrain=True,
            help="""\
Train a Bradley–Terry reward model (TRL's RewardTrainer, or --grouped) and record it.

--criterion NAME trains on one criterion's pairs (Safe RLHF's reward and cost models are
two runs); --criteria a,b trains a multi-objective reward model: one backbone, one head
per criterion, each head on its own criterion's pairs, saved as one model whose heads
are named (`config.id2label`).

Example: preflab train reward --model smollm2-135m-instruct --grouped --use-margin

Example: preflab train reward --criteria harmlessness,helpfulness --num-train-epochs 2
""",
        ),
        Method(
            "dpo",
            DPOTrainConfig,
            build=dpo.build_dpo_trainer,
            model_class="AutoModelForCausalLM",
            model_kind="policy",
            evaluate=dpo.evaluate_run,
            finish=dpo.finish,
            retrain=True,
            help="""\
Train a policy with DPO (TRL's DPOTrainer) from a base model or model version, and record it.

Example: preflab train dpo --model policy-3 --beta 0.1 --lora --learning-rate 5e-6
""",
        ),
        Method(
            "simpo",
            simpo.SimPOTrainConfig,
            build=simpo.build_simpo_trainer,
            model_class="AutoModelForCausalLM",
            model_kind="policy",
            evaluate=simpo.evaluate_run,
            finish=simpo.finish,
            help="""\
Train a policy with SimPO (TRL's CPO trainer, loss simpo): no reference model, and record it.

Example: preflab train simpo --model policy-3 --beta 2.0 --simpo-gamma 0.5 --learning-rate 5e-7
""",
        ),
        Method(
            "rl",
            rl.RLTrainConfig,
            build=rl.build_rl_trainer,
            model_class="AutoModelForCausalLM",
            model_kind="policy",
            evaluate=rl.evaluate_run,
            finish=rl.finish,
            prepare=rl.prepare,
            help="""\
Optimise a policy against a reward model with RL (TRL's RLOOTrainer, or GRPO), and record it.

The reward is R_RM − β·KL(π‖π_ref); prompts are the dataset version's training
prompts (or --prompts-file's). TRL 1.x has no PPO trainer: RLOO is the critic-free
PPO of the minimal-RLHF notebook, with a leave-one-out baseline.

Example: preflab train rl --model policy-3 --reward-model reward-2 --beta 0.05 --max-steps 200
""",
        ),
        Method(
            "pair-ranker",
            pair_ranker.PairRankerTrainConfig,
            build=pair_ranker.build_pair_ranker_trainer,
            model_class="AutoModelForSequenceClassification",
            model_kind="pair-ranker",
            evaluate=pair_ranker.evaluate_run,
            finish=pair_ranker.finish,
            help="""\
Train a pairwise ranker (PairRM-style: reads the prompt and both responses at once) and record it.

Trained on each comparison in both orders; P(A ≻ B) = σ(s(A,B) − s(B,A)), so
P(A ≻ B) = 1 − P(B ≻ A). Judge with it: `preflab judge pair-ranker VERSION`.

Example: preflab train pair-ranker --model smollm2-135m-instruct --learning-rate 2e-5 --num-train-epochs 2
""",
        ),
    )
}


def train(
    method: str,
    sessions: sessionmaker[Session] | None,
    config,
    model_name: str,
    dataset_version: str | None = None,
    resume: bool = False,
    output_dir: str | None = None,
    callbacks: Sequence = (),
    reporter: Reporter = SILENT,
) -> RunResult | None:
    """Train a model with one of `METHODS` and record the run; the result on rank 0 (None on the other ranks).

    Args:
        method: its name: `reward`, `dpo`, `simpo`, `rl` or `pair-ranker`.
        sessions: a sessionmaker on rank 0, None on the other ranks.
        config: the method's config; on resume, the run's stored config replaces it.
        Others as in `preflab.training.runs.execute`.
    """
    return execute(
        METHODS[method], config, sessions, model_name, dataset_version, resume, output_dir, callbacks, reporter
    )


# --- what every method's training does ---------------------------------------------------


def training_summary(trainer, output) -> dict[str, Any]:
    """The numbers of the training loop itself: steps, runtime, first and last logged loss."""
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return {
        "global_step": trainer.state.global_step,
        "train_loss": output.training_loss,
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "train_runtime": output.metrics.get("train_runtime"),
        "epochs": trainer.state.epoch,
        "world_size": trainer.args.world_size,
    }  # what the Trainer really ran on, not what was asked


def run_trainer(trainer, plan: RunPlan, callbacks: Sequence = (), reporter: Reporter = SILENT):
    """Train (from the plan's checkpoint, if resuming) with its progress on stderr on rank 0, --json or not.

    transformers' own printers write log dicts to stdout, which would spoil `--json`: they go.
    """
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from preflab.training.progress import training_progress

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    progress = (
        training_progress(f"training {plan.kind} run {plan.run_id}", reporter)
        if reporter.steps() and is_main_process()
        else None
    )
    for callback in ([progress] if progress else []) + list(callbacks):
        trainer.add_callback(callback)
    try:
        return trainer.train(resume_from_checkpoint=plan.resume_from)
    finally:
        if progress is not None:
            progress.close()
        if is_main_process() and Path(plan.checkpoint_dir).is_dir():  # kept for --resume, or asked for
            open_to_umask(plan.checkpoint_dir)


def save_final(trainer, plan: RunPlan, auto_class) -> None:
    """Save the trained model where its model version will point: full weights, LoRA merged in.

    A merged model loads with plain `from_pretrained`, so evaluation, generation and
    the next training run need not know it was trained with adapters. The adapter
    is saved first by the Trainer on every rank (which gathers FSDP/ZeRO-3 shards),
    kept in `adapter/`, and merged into a fresh copy of the starting model on rank 0.
    """
    from accelerate.utils import is_peft_model

    if not is_peft_model(trainer.accelerator.unwrap_model(trainer.model)):
        trainer.save_model(plan.model_dir)
        if trainer.accelerator.is_main_process:
            open_to_umask(plan.model_dir)
        trainer.accelerator.wait_for_everyone()
        return
    adapter = str(Path(plan.run_dir) / "adapter")
    trainer.save_model(adapter)
    if trainer.accelerator.is_main_process:
        from peft import PeftModel

        trained = trainer.accelerator.unwrap_model(trainer.model).config  # its heads, and their names
        extra = (
            {"num_labels": trained.num_labels, "id2label": trained.id2label, "label2id": trained.label2id}
            if "SequenceClassification" in auto_class.__name__
            else {}
        )
        base = auto_class.from_pretrained(plan.model_path, **extra)
        merged = PeftModel.from_pretrained(base, adapter).merge_and_unload()
        merged.config.pad_token_id = trainer.processing_class.pad_token_id
        merged.save_pretrained(plan.model_dir)
        trainer.processing_class.save_pretrained(plan.model_dir)
        open_to_umask(adapter)
        open_to_umask(plan.model_dir)
    trainer.accelerator.wait_for_everyone()
