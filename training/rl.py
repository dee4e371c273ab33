"""`train rl`: a policy optimised online against a reward model, with a KL leash to where it started.

This is the RLHF step of the minimal-RLHF notebook: sample completions, score
them with the reward model, and push up the ones that beat their baseline, with
the reward R = R_RM − β·KL(π‖π_ref). TRL 1.x ships no PPO trainer; its
`RLOOTrainer` is the critic-free variant the notebook itself used (no value
network, the reward given once at the end), with a better baseline: the mean
reward of the other completions sampled for the same prompt (leave-one-out).
`--algorithm grpo` uses TRL's `GRPOTrainer` instead (its β defaults to 0: no
reference model and no KL).

The reward model is called through preflab's own scorer rather than handed to
TRL as a model: TRL scores prompt + completion without the end-of-sequence token,
while preflab's reward models learned on sequences that end with it (as TRL's
RewardTrainer builds them), so TRL would read their score at a position they
were never trained on.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from preflab.errors import ConfigError, InputError
from preflab.lm.loading import load_tokenizer_for_training
from preflab.lm.sampling import SamplingConfig
from preflab.training.config import TrainConfig
from preflab.training.rl_heldout import evaluate_policy_rewards
from preflab.training.runs import RunPlan

RL_ALGORITHMS = ("rloo", "grpo")
DEFAULT_BETA = {"rloo": 0.05, "grpo": 0.0}  # TRL's own defaults for each trainer
HISTORY = ("reward", "kl", "entropy")  # what the trainers log per step, kept over the whole run


@dataclass
class RLTrainConfig(TrainConfig, SamplingConfig):
    """Online RL from a reward model: TRL's RLOOTrainer, or its GRPOTrainer."""

    learning_rate: float = field(default=1e-6, metadata={"help": "Peak learning rate for AdamW."})
    per_device_train_batch_size: int = field(
        default=8, metadata={"help": "Completions per device per optimizer step (whole groups of --n completions)."}
    )
    max_length: int | None = field(
        default=1024, metadata={"help": "Longest prompt plus completion, in tokens; longer prompts are skipped."}
    )
    n: int = field(
        default=4,
        metadata={
            "flags": ("--num-generations",),  # TRL's name; also what torchrun's own parser cannot mistake for --nnodes
            "help": "Completions sampled per prompt: each one's baseline is the others' mean reward (RLOO) "
            "or the group's mean and spread (GRPO).",
        },
    )
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of the policy while training."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling probability mass while training."})
    max_new_tokens: int = field(default=256, metadata={"help": "Longest completion, in tokens."})
    algorithm: str = field(
        default="rloo",
        metadata={
            "help": "rloo: REINFORCE with a leave-one-out baseline and the KL in the reward; grpo: group-normalised "
            "advantages, the KL in the loss.",
            "choices": RL_ALGORITHMS,
        },
    )
    reward_model: str | None = field(
        default=None,
        metadata={
            "help": "The reward: a reward-model version (from `train reward`), or the path or hub id of any "
            "one-label sequence-classification model."
        },
    )
    reward_head: str | None = field(
        default=None,
        metadata={"help": "A multi-objective reward model (train reward --criteria): the reward is this head's score."},
    )
    reward_combine: str | None = field(
        default=None,
        metadata={
            "help": "A multi-objective reward model: the reward is each completion's place in its prompt's group "
            "(0 … 1) by this rule over the heads, as export --combine orders (mean, weighted:…, lexicographic:…)."
        },
    )
    beta: float | None = field(
        default=None,
        metadata={
            "help": "KL coefficient β in R = R_RM − β·KL(π‖π_ref) (default: TRL's, 0.05 for rloo; 0 for grpo, "
            "which then loads no reference model)."
        },
    )
    num_iterations: int = field(
        default=1,
        metadata={
            "help": "Optimisation passes over each sampled batch; above 1 the probability ratio is clipped as in PPO."
        },
    )
    epsilon: float = field(default=0.2, metadata={"help": "Clip range of the probability ratio (PPO's ε)."})
    prompts_file: str | None = field(
        default=None,
        metadata={
            "help": "Train on this JSON Lines file's prompts (imported into the store) instead of the dataset "
            "version's training prompts."
        },
    )
    eval_prompts: int = field(
        default=64,
        metadata={
            "help": "Held-out prompts on which the start and trained policies are sampled and scored after "
            "training (0: skip)."
        },
    )

    def __post_init__(self) -> None:
        TrainConfig.__post_init__(self)
        SamplingConfig.__post_init__(self)
        if self.algorithm not in RL_ALGORITHMS:
            raise ConfigError(f"unknown --algorithm {self.algorithm!r} (expected one of {', '.join(RL_ALGORITHMS)})")
        if self.beta is None:
            self.beta = DEFAULT_BETA[self.algorithm]
        if self.beta < 0:
            raise ConfigError(f"--beta cannot be negative, got {self.beta}")
        if self.n < 2:
            raise ConfigError(f"--n must be at least 2: a completion's baseline is the other ones, got {self.n}")
        if (self.per_device_train_batch_size * self.gradient_accumulation_steps) % self.n:
            raise ConfigError(
                f"--per-device-train-batch-size × --gradient-accumulation-steps must be a multiple of "
                f"--n ({self.n}), so every prompt's completions land in one batch"
            )
        if self.num_iterations < 1 or self.epsilon <= 0:
            raise ConfigError("--num-iterations must be at least 1 and --epsilon positive")
        if self.eval_prompts < 0:
            raise ConfigError("--eval-prompts cannot be negative")
        if self.max_length is not None and self.max_length <= self.max_new_tokens:
            raise ConfigError(
                f"--max-length ({self.max_length}) leaves no room for a prompt next to "
                f"--max-new-tokens ({self.max_new_tokens})"
            )

    def to_trl(self, output_dir: str):
        from trl import GRPOConfig, RLOOConfig

        kwargs = self.trainer_kwargs(output_dir)
        kwargs.pop("max_length")  # prompts are filtered by length here; TRL's RL configs have no such field
        trl_class = RLOOConfig if self.algorithm == "rloo" else GRPOConfig
        return trl_class(
            beta=self.beta,
            num_generations=self.n,
            max_completion_length=self.max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            num_iterations=self.num_iterations,
            epsilon=self.epsilon,
            **kwargs,
        )


class RewardModelReward:
    """A reward model as a TRL reward function, scoring each text in the form it trained on (`scoring.as_trained`)."""

    __name__ = "reward_model"  # TRL logs `rewards/<name>/mean`

    def __init__(self, location: str, device: str, batch_size: int = 32, head=None, combine=None):
        from preflab.db.export.heads import heads_reader
        from preflab.lm.loading import head_names, load_sequence_scorer

        self.model, self.tokenizer = load_sequence_scorer(location, device=device, heads=True)
        self.batch_size = batch_size
        config = self.model.config
        options = ("--reward-head NAME", "--reward-combine RULE")
        self.read = heads_reader(head_names(config), config.num_labels, head, combine, options=options)

    def __call__(self, prompts: list, completions: list, **_) -> list[float]:
        """Each completion's reward: its score, or its head's, or its place by the rule among its prompt's group
        (TRL hands a prompt's completions in together: its advantages are relative to them anyway)."""
        from preflab.lm.scoring import reward_scores, reward_vectors

        if self.read is None:
            return reward_scores(self.model, self.tokenizer, prompts, completions, self.batch_size)
        vectors = reward_vectors(self.model, self.tokenizer, prompts, completions, self.batch_size)
        groups: dict[str, list[int]] = {}
        for i, prompt in enumerate(prompts):
            groups.setdefault(_key(prompt), []).append(i)
        out = [0.0] * len(vectors)
        for members in groups.values():
            for i, value in zip(members, self.read([vectors[i] for i in members])):
                out[i] = value
        return out


def _key(prompt) -> str:
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)


def file_prompts(path: str) -> list:
    """The usable prompts of a JSON Lines prompts file, read as `preflab import prompts` reads them.

    A prompt is its text, or its messages when it is a conversation (`compact`).
    """
    from preflab.db.conversation import compact
    from preflab.db.ingest.jsonl import open_jsonl, parse_prompt
    from preflab.errors import Invalid

    prompts = []
    with open_jsonl(path) as handle:
        for line in handle:
            if line.strip():
                try:
                    prompts.append(compact(parse_prompt(line).prompt))
                except Invalid:
                    continue  # quarantined with its reason when rank 0 imported the file
    return prompts


def prompt_length(tokenizer, prompt) -> int:
    if isinstance(prompt, list):
        return len(
            tokenizer.apply_chat_template(prompt, tokenize=True, add_generation_prompt=True, return_dict=True)[
                "input_ids"
            ]
        )
    return len(tokenizer(text=prompt)["input_ids"])


def training_prompts(plan: RunPlan, config: RLTrainConfig, tokenizer) -> list:
    """The distinct prompts to train on, in order, without those too long for --max-length."""
    from datasets import load_from_disk

    from preflab.db.conversation import user_turn
    from preflab.lm.loading import has_chat_template

    if config.prompts_file:
        prompts = file_prompts(config.prompts_file)
    else:
        prompts = list(load_from_disk(plan.data_dir)["train"]["prompt"])
    distinct = list({_key(p): p for p in prompts}.values())
    if any(isinstance(p, list) for p in distinct) and not has_chat_template(tokenizer):
        raise InputError(
            "the model has no chat template, so it cannot read the conversations of several messages "
            f"in {config.prompts_file or 'the dataset version'}: train a model that has one (a base "
            "model reads single-message prompts, as plain text)"
        )
    if has_chat_template(tokenizer):
        # Every prompt as messages, so the policy reads each through its chat template (a conversation's
        # whole history), as training on a dataset version gives it; and the column holds one type.
        distinct = [user_turn(p) if isinstance(p, str) else p for p in distinct]
    if config.max_length is not None:
        room = config.max_length - config.max_new_tokens
        distinct = [p for p in distinct if prompt_length(tokenizer, p) <= room]
    if not distinct:
        raise ConfigError(
            f"no prompt fits in --max-length {config.max_length} with --max-new-tokens {config.max_new_tokens}"
        )
    return distinct


def build_rl_trainer(plan: RunPlan, config: RLTrainConfig):
    from datasets import Dataset
    from trl import GRPOTrainer, RLOOTrainer

    args = config.to_trl(plan.checkpoint_dir)
    tokenizer = load_tokenizer_for_training(plan.model_path)
    tokenizer.padding_side = "left"  # generation pads prompts on the left
    prompts = Dataset.from_dict({"prompt": training_prompts(plan, config, tokenizer)})
    reward = RewardModelReward(
        config.reward_model,
        str(args.device),
        config.per_device_eval_batch_size,
        config.reward_head,
        config.reward_combine,
    )
    trainer_class = RLOOTrainer if config.algorithm == "rloo" else GRPOTrainer
    return trainer_class(
        plan.model_path,
        reward_funcs=reward,
        args=args,
        train_dataset=prompts,
        processing_class=tokenizer,
        peft_config=config.peft_config("CAUSAL_LM"),
    )


def training_history(log_history: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean reward, KL and entropy as logged over training: the series and its first and last values."""
    rows = [
        {"step": entry.get("step"), **{k: entry[k] for k in HISTORY if k in entry}}
        for entry in log_history
        if "reward" in entry
    ]
    out: dict[str, Any] = {"history": rows}
    for key in HISTORY:
        values = [row[key] for row in rows if key in row]
        out[f"train_{key}_first"] = values[0] if values else None
        out[f"train_{key}_last"] = values[-1] if values else None
    return out


def resolve_reward_model(session: Session, name: str) -> tuple[str, str, int | None]:
    """(name to record, where to load it, model version id) of the reward model named `name`."""
    from preflab.db.models import ModelVersion
    from preflab.lm.loading import resolve_model_path
    from preflab.lm.names import resolve_model

    label, location, version_id = resolve_model(session, name)
    version = session.get(ModelVersion, version_id) if version_id else None
    return (version.name if version else label), str(resolve_model_path(location)), version_id


def prepare(sessions: sessionmaker[Session], config: RLTrainConfig) -> RLTrainConfig:
    """A new run's config, settled on rank 0 before the run is planned: the reward model found, the prompts stored."""
    if not config.reward_model:
        raise ConfigError("name the reward with --reward-model (a reward-model version, path or hub id)")
    with sessions.begin() as session:
        _, location, _ = resolve_reward_model(session, config.reward_model)
    # Every rank (and a later --resume) loads the reward model from where rank 0 found it.
    config = dataclasses.replace(config, reward_model=location)
    if config.prompts_file:
        from preflab.labelling.selection import prompts_from_file

        prompts_from_file(sessions, config.prompts_file)  # the store holds every prompt trained on
    return config


def finish(trainer, plan: RunPlan, config: RLTrainConfig) -> dict[str, Any]:
    """Mean reward, KL and entropy as logged over training."""
    return training_history(trainer.state.log_history)


def evaluate_run(plan: RunPlan, config: RLTrainConfig, sessions: sessionmaker[Session]) -> dict[str, Any]:
    """The reward model's version and β, and the reward of fresh samples before and after training.

    The start and trained policies are sampled on the dataset version's held-out
    prompts (the first `eval_prompts`) and scored by the reward model.
    """
    from datasets import load_from_disk

    with sessions.begin() as session:
        name, _, version_id = resolve_reward_model(session, config.reward_model)
    lineage = {
        "reward_model_version": name,
        "reward_model_version_id": version_id,
        "beta": config.beta,
        "algorithm": config.algorithm,
    }
    splits = load_from_disk(plan.data_dir)
    test = list({_key(p): p for p in splits["test"]["prompt"]}.values()) if "test" in splits else []
    held = evaluate_policy_rewards(
        plan.model_dir,
        plan.model_path,
        config.reward_model,
        test[: config.eval_prompts],
        config,
        config.per_device_eval_batch_size,
    )
    return {**lineage, **held}
