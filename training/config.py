"""Training configurations: one dataclass per method, mapped onto TRL's configs.

These hold what preflab decides (and stores with each training run); everything
else is TRL's and transformers' defaults. The CLI options of `preflab train …`
are generated from these fields and their `help` metadata, so a field added
here is an option there. Defaults differ from TRL's where preflab knows better:
no gradient checkpointing unless asked (it costs ~20% speed and tiny and
mid-size models do not need it), bf16 only where the hardware has it, and
reference log-probabilities precomputed for DPO (one frozen pass instead of a
reference forward on every step).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from preflab.errors import ConfigError


def installed_dpo_losses() -> tuple[str, ...]:
    """The DPO losses the installed TRL offers, read from its `DPOConfig.loss_type` help.

    TRL keeps no list of them in code (its trainer branches on the names), so the
    help text it writes for users is the list. It is read from the source file with
    `ast` rather than imported: importing TRL loads torch, and this module builds
    the `train dpo` options. A test holds every name here to a branch of TRL's loss.
    """
    import ast
    import importlib.util
    import re
    from pathlib import Path

    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        return ()
    source = Path(next(iter(spec.submodule_search_locations))) / "trainer" / "dpo_config.py"
    if not source.is_file():
        return ()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "loss_type":
            for keyword in getattr(node.value, "keywords", []):
                if keyword.arg == "metadata":
                    help_text = ast.literal_eval(keyword.value).get("help", "")
                    return tuple(dict.fromkeys(re.findall(r"`'(\w+)'`", help_text)))
    return ()


DPO_LOSS_TYPES = installed_dpo_losses()
SCHEDULERS = ("linear", "cosine", "constant", "constant_with_warmup", "cosine_with_restarts", "polynomial")


def _checkpointing_field() -> str:
    """transformers 5 renamed `gradient_checkpointing` (the old name still works, with a warning)."""
    from transformers import TrainingArguments

    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    return "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"


@dataclass
class TrainConfig:
    """What every preflab training run shares."""

    learning_rate: float = field(default=1e-4, metadata={"help": "Peak learning rate for AdamW."})
    num_train_epochs: float = field(default=1.0, metadata={"help": "Passes over the training split."})
    max_steps: int = field(
        default=-1, metadata={"help": "Stop after this many optimizer steps (overrides epochs when > 0)."}
    )
    per_device_train_batch_size: int = field(
        default=8, metadata={"help": "Training batch per device: pairs, or prompts (groups) with --grouped."}
    )
    per_device_eval_batch_size: int = field(default=16, metadata={"help": "Evaluation batch per device."})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Batches per optimizer step."})
    max_length: int | None = field(
        default=1024,
        metadata={"help": "Longest tokenized prompt+response; longer pairs are dropped (reward) or truncated (DPO)."},
    )
    lr_scheduler_type: str = field(
        default="linear", metadata={"help": "Learning-rate schedule.", "choices": SCHEDULERS}
    )
    warmup_steps: float = field(default=0.0, metadata={"help": "Warmup steps, or a fraction of all steps when < 1."})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    seed: int = field(default=42, metadata={"help": "Seed for initialisation and shuffling."})
    bf16: bool | None = field(
        default=None, metadata={"help": "bf16 mixed precision (default: on where the GPU supports it, off on CPU)."}
    )
    gradient_checkpointing: bool = field(
        default=False, metadata={"help": "Recompute activations in the backward pass: less memory, ~20% slower."}
    )
    use_cpu: bool | None = field(
        default=None, metadata={"help": "Train on the CPU (default: only when no GPU is present)."}
    )
    lora: bool = field(default=False, metadata={"help": "Train LoRA adapters (peft) instead of all weights."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA scaling alpha."})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    lora_target_modules: str = field(
        default="all-linear", metadata={"help": "Comma-separated module names for LoRA, or 'all-linear'."}
    )
    logging_steps: int = field(default=10, metadata={"help": "Log the loss every N steps."})
    save_steps: int = field(default=500, metadata={"help": "Save a checkpoint (for --resume) every N steps."})
    save_total_limit: int | None = field(
        default=1,
        metadata={
            "help": "Keep at most this many checkpoints while training (the newest is what --resume continues from)."
        },
    )
    keep_checkpoints: bool = field(
        default=False,
        metadata={
            "help": "Keep the checkpoints once the run succeeds (they hold the optimizer state, often twice the "
            "model's size; by default they are deleted, and a failed run keeps them for --resume)."
        },
    )
    report_to: str = field(default="none", metadata={"help": "Experiment trackers (wandb, tensorboard…), or none."})

    def __post_init__(self) -> None:
        if self.learning_rate <= 0:
            raise ConfigError(f"--learning-rate must be positive, got {self.learning_rate}")
        if self.num_train_epochs <= 0 and self.max_steps <= 0:
            raise ConfigError("set --num-train-epochs or --max-steps to a positive number")
        for name in (
            "per_device_train_batch_size",
            "per_device_eval_batch_size",
            "gradient_accumulation_steps",
            "logging_steps",
            "save_steps",
            "lora_r",
            "lora_alpha",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.max_length is not None and self.max_length < 2:
            raise ConfigError(f"--max-length must be at least 2 tokens, got {self.max_length}")
        if self.lr_scheduler_type not in SCHEDULERS:
            raise ConfigError(f"unknown --lr-scheduler-type {self.lr_scheduler_type!r}")
        if self.warmup_steps < 0 or self.weight_decay < 0:
            raise ConfigError("--warmup-steps and --weight-decay cannot be negative")
        if not 0 <= self.lora_dropout < 1:
            raise ConfigError(f"--lora-dropout must be in [0, 1), got {self.lora_dropout}")
        if self.save_total_limit is not None and self.save_total_limit < 1:
            raise ConfigError("--save-total-limit must be at least 1")

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        """Rebuild a stored config; unknown keys (from another preflab version) are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def device_settings(self) -> dict[str, Any]:
        """use_cpu and bf16 resolved against the hardware actually present."""
        import torch

        cuda = torch.cuda.is_available()
        use_cpu = (not cuda) if self.use_cpu is None else self.use_cpu
        bf16 = (not use_cpu and torch.cuda.is_bf16_supported()) if self.bf16 is None else self.bf16
        if bf16 and use_cpu:
            raise ConfigError("--bf16 needs a GPU here; leave it unset to train in fp32 on the CPU")
        return {"use_cpu": use_cpu, "bf16": bf16}

    def trainer_kwargs(self, output_dir: str) -> dict[str, Any]:
        """Keyword arguments shared by TRL's RewardConfig and DPOConfig."""
        return dict(
            output_dir=output_dir,
            learning_rate=self.learning_rate,
            num_train_epochs=self.num_train_epochs,
            max_steps=self.max_steps,
            per_device_train_batch_size=self.per_device_train_batch_size,
            per_device_eval_batch_size=self.per_device_eval_batch_size,
            gradient_accumulation_steps=self.gradient_accumulation_steps,
            max_length=self.max_length,
            lr_scheduler_type=self.lr_scheduler_type,
            warmup_steps=self.warmup_steps,
            weight_decay=self.weight_decay,
            seed=self.seed,
            **{_checkpointing_field(): self.gradient_checkpointing},
            logging_steps=self.logging_steps,
            save_strategy="steps",
            save_steps=self.save_steps,
            save_total_limit=self.save_total_limit,
            report_to=[] if self.report_to == "none" else self.report_to.split(","),
            disable_tqdm=True,  # preflab shows its own progress bar on stderr
            **self.device_settings(),
        )

    def peft_config(self, task_type: str):
        if not self.lora:
            return None
        from peft import LoraConfig

        targets = self.lora_target_modules
        modules = targets if targets == "all-linear" else [m.strip() for m in targets.split(",") if m.strip()]
        # A reward head is new: train it in full next to the adapters.
        extra = {"modules_to_save": ["score"]} if task_type == "SEQ_CLS" else {}
        return LoraConfig(
            r=self.lora_r,
            lora_alpha=self.lora_alpha,
            lora_dropout=self.lora_dropout,
            target_modules=modules,
            task_type=task_type,
            **extra,
        )


@dataclass
class RewardTrainConfig(TrainConfig):
    """A Bradley–Terry reward model (TRL's RewardTrainer, or preflab's grouped trainer)."""

    grouped: bool = field(
        default=False,
        metadata={
            "help": "One forward pass per candidate and all of a prompt's pairs as one batch element (InstructGPT)."
        },
    )
    use_margin: bool = field(
        default=False,
        metadata={"help": "Subtract the dataset's `margin` column inside the loss: -log σ(r_c - r_r - margin)."},
    )
    center_rewards_coefficient: float | None = field(
        default=None, metadata={"help": "Push rewards towards zero mean with this weight (0.01 is typical)."}
    )
    criterion: str | None = field(
        default=None,
        metadata={
            "help": "Train on this criterion's pairs only (helpfulness, harmlessness, …): Safe RLHF's reward "
            "and cost models are two such runs. Default: the pairs of the store's one criterion.",
            "metavar": "NAME",
        },
    )
    criteria: str | None = field(
        default=None,
        metadata={
            "help": "A multi-objective reward model: one backbone and one head per criterion (a,b,…), each head "
            "trained on its own criterion's pairs only, saved as one model whose heads are named.",
            "metavar": "A,B,…",
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.center_rewards_coefficient is not None and self.center_rewards_coefficient < 0:
            raise ConfigError("--center-rewards-coefficient cannot be negative")
        from preflab.db.ingest.records import criterion_name
        from preflab.errors import Invalid

        try:
            for name in [self.criterion] if self.criterion is not None else self.criteria_names:
                criterion_name(name, "--criterion" if self.criterion is not None else "each of --criteria")
        except Invalid as exc:
            raise ConfigError(str(exc)) from None
        if self.criterion is not None and self.criteria is not None:
            raise ConfigError("--criterion trains one reward model and --criteria one head each: give one of them")
        if self.criteria is not None:
            names = self.criteria_names
            if len(names) < 2 or len(set(names)) != len(names):
                raise ConfigError(f"--criteria names two criteria or more, each once (got {self.criteria!r})")
            if self.grouped:
                raise ConfigError("--grouped trains one head; leave it out with --criteria")

    @property
    def criteria_names(self) -> list[str]:
        """--criteria's names, in the order of the heads."""
        return [name.strip() for name in (self.criteria or "").split(",") if name.strip()]

    @property
    def data_criteria(self) -> list[str]:
        """The criteria whose pairs a run trains on: --criterion's, --criteria's, or none chosen (`[]`)."""
        return [self.criterion] if self.criterion is not None else self.criteria_names

    def to_trl(self, output_dir: str):
        from trl import RewardConfig

        return RewardConfig(
            center_rewards_coefficient=self.center_rewards_coefficient, **self.trainer_kwargs(output_dir)
        )


@dataclass
class DPOTrainConfig(TrainConfig):
    """Direct preference optimisation with TRL's DPOTrainer."""

    learning_rate: float = field(default=1e-6, metadata={"help": "Peak learning rate for AdamW."})
    beta: float = field(
        default=0.1, metadata={"help": "Strength of the pull towards the reference model (higher: stay closer)."}
    )
    loss_type: str = field(
        default="sigmoid",
        metadata={
            "flags": ("--loss",),
            "help": "DPO loss, or several joined by commas and summed with --loss-weights (e.g. sigmoid,sft: DPO "
            "plus the chosen responses' NLL, as in RPO). One of the installed TRL's: "
            f"{', '.join(DPO_LOSS_TYPES) or 'none (TRL is not installed)'}.",
        },
    )
    loss_weights: str | None = field(
        default=None, metadata={"help": "Comma-separated weights of the losses in --loss-type (default: 1 each)."}
    )
    label_smoothing: float = field(
        default=0.0, metadata={"help": "Probability that a label is flipped (robust/cDPO), or EXO's epsilon."}
    )
    precompute_ref_log_probs: bool = field(
        default=True,
        metadata={"help": "Compute the reference log-probabilities once before training instead of on every step."},
    )
    precompute_ref_batch_size: int | None = field(
        default=None, metadata={"help": "Batch size of that precomputation (default: the training batch size)."}
    )
    pad_to_multiple_of: int | None = field(
        default=None, metadata={"help": "Pad sequences to a multiple of this (8 suits tensor cores)."}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.beta <= 0:
            raise ConfigError(f"--beta must be positive, got {self.beta}")
        if not self.losses:
            raise ConfigError("--loss-type names no loss")
        for loss in self.losses:
            if DPO_LOSS_TYPES and loss not in DPO_LOSS_TYPES:
                raise ConfigError(f"unknown --loss-type {loss!r} (expected one of {', '.join(DPO_LOSS_TYPES)})")
        if self.loss_weights is not None:
            try:
                weights = [float(w) for w in self.loss_weights.split(",")]
            except ValueError:
                raise ConfigError(
                    f"--loss-weights must be numbers joined by commas, got {self.loss_weights!r}"
                ) from None
            if len(weights) != len(self.losses):
                raise ConfigError(f"--loss-weights has {len(weights)} weights for {len(self.losses)} losses")
        if not 0 <= self.label_smoothing < 0.5:
            raise ConfigError(f"--label-smoothing must be in [0, 0.5), got {self.label_smoothing}")
        if "exo_pair" in self.losses and self.label_smoothing == 0:
            raise ConfigError("the exo_pair loss needs --label-smoothing > 0 (1e-3 is typical)")

    @property
    def losses(self) -> list[str]:
        return [loss.strip() for loss in self.loss_type.split(",") if loss.strip()]

    def to_trl(self, output_dir: str):
        from trl import DPOConfig

        weights = None if self.loss_weights is None else [float(w) for w in self.loss_weights.split(",")]
        return DPOConfig(
            beta=self.beta,
            loss_type=self.losses,
            loss_weights=weights,
            label_smoothing=self.label_smoothing,
            precompute_ref_log_probs=self.precompute_ref_log_probs,
            precompute_ref_batch_size=self.precompute_ref_batch_size,
            pad_to_multiple_of=self.pad_to_multiple_of,
            **self.trainer_kwargs(output_dir),
        )
