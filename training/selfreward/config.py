"""A self-rewarding loop's settings: what each iteration does, and where an unset option comes from.

`SelfRewardConfig` extends the one sampling config (`SamplingConfig`: n,
temperature, top-p, max-new-tokens, seed) with the loop's own fields; the DPO
step's settings are a `DPOTrainConfig`. Both are stored with every iteration,
and an option not given on the command line is the loop's last iteration's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from preflab.db.models import SelfRewardIteration
from preflab.errors import ConfigError
from preflab.labelling.judges.score import SCORE_METHODS
from preflab.lm.sampling import SamplingConfig
from preflab.training.evaluate import ANSWER_JUDGES
from preflab.training.selfreward.data import PAIR_CHOICES

# Stored configs from before the sampling fields came from SamplingConfig: old name -> field.
RENAMED = {"sampling_seed": "seed"}


@dataclass
class SelfRewardConfig(SamplingConfig):
    """One self-rewarding iteration's settings (stored with the iteration).

    The sampling fields are the candidates' (`seed` also seeds prompt writing,
    judging and the held-out split); `top_p` applies to prompt writing too.
    """

    model: str | None = field(
        default=None,
        metadata={
            "help": "M_0, the model the loop starts from (model version, embedded name, path or hub id); "
            "default: the global --model. Later iterations start from the previous one's model."
        },
    )
    prompts_per_iteration: int = field(default=64, metadata={"help": "New prompts per iteration."})
    prompt_pool: str | None = field(
        default=None,
        metadata={
            "help": "Take new prompts from this JSON Lines file (the next ones not stored yet) instead of "
            "having M_t write them."
        },
    )
    shots: int = field(default=8, metadata={"help": "Existing prompts shown per request when M_t writes prompts."})
    prompt_max_new_tokens: int = field(default=128, metadata={"help": "Longest prompt M_t may write, in tokens."})
    prompt_temperature: float = field(default=1.0, metadata={"help": "Sampling temperature for writing prompts."})
    batch_size: int = field(default=8, metadata={"help": "Sequences per forward pass (generation, judging)."})
    judge: str = field(default="score", metadata={"help": "Judge of the candidates.", "choices": ANSWER_JUDGES})
    judge_model: str | None = field(
        default=None,
        metadata={"help": "The judge's model (a reward model for reward-model); default: M_t itself (self-rewarding)."},
    )
    judge_method: str = field(
        default="expected",
        metadata={
            "help": "score judge, always: expected (the probability-weighted mean of the score tokens 0-5 after "
            '"Score: ", one forward pass per candidate; always yields a score, so it works on small '
            'models such as the embedded 135M one, which rarely write "Score: n") or sampled (the '
            "paper's k sampled replies, --judge-samples).",
            "choices": SCORE_METHODS,
        },
    )
    judge_samples: int = field(default=3, metadata={"help": "score judge, sampled: scores sampled and averaged (k)."})
    judge_max_new_tokens: int = field(default=192, metadata={"help": "score judge, sampled: longest judge reply."})
    judge_conversational: bool = field(
        default=False,
        metadata={
            "help": "reward-model judge: chat-template its inputs even when its model has no chat template of its own "
            "(one with a template always reads messages, as it trained on them)."
        },
    )
    pairs: str = field(
        default="best-vs-worst",
        metadata={
            "help": "best-vs-worst: highest vs lowest per prompt (ties dropped); all: every strict pair.",
            "choices": PAIR_CHOICES,
        },
    )
    with_human: bool = field(
        default=False,
        metadata={"help": "Mix in people's rankings collected since the last iteration (all of them at iteration 1)."},
    )
    eval_prompts: str | None = field(
        default=None,
        metadata={
            "help": "JSON Lines file of held-out prompts for the evaluation (read once, at iteration 1); default: "
            "stored prompts in the test split, else a share of the stored prompts."
        },
    )
    eval_limit: int = field(default=32, metadata={"help": "At most this many held-out prompts."})
    eval_max_new_tokens: int = field(default=128, metadata={"help": "Longest answer in the evaluation."})
    agreement_prompts: int = field(
        default=8,
        metadata={
            "help": "At each evaluation the judge also ranks this many prompts that people ranked (the first by id; "
            "its rankings are stored as the judge's) and its agreement with them is recorded; 0: none."
        },
    )
    test_size: float = field(
        default=0.1,
        metadata={
            "help": "Share of each iteration's prompts kept out of DPO training (held-out implicit-reward accuracy)."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in (
            "prompts_per_iteration",
            "shots",
            "prompt_max_new_tokens",
            "batch_size",
            "judge_samples",
            "judge_max_new_tokens",
            "eval_max_new_tokens",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.n < 2:
            raise ConfigError("--n must be at least 2: a judge needs two candidates to prefer one")
        if self.eval_limit < 0:
            raise ConfigError("--eval-limit cannot be negative")
        if self.agreement_prompts < 0:
            raise ConfigError("--agreement-prompts cannot be negative")
        if self.judge_method not in SCORE_METHODS:
            raise ConfigError(f"--judge-method must be one of {', '.join(SCORE_METHODS)}, got {self.judge_method!r}")
        if self.prompt_temperature <= 0:
            raise ConfigError(f"--prompt-temperature must be positive, got {self.prompt_temperature}")
        if self.judge not in ANSWER_JUDGES:
            raise ConfigError(
                f"--judge must be one of {', '.join(ANSWER_JUDGES)} (the reference judge needs "
                f"reference answers, which written prompts lack), got {self.judge!r}"
            )
        if self.judge == "reward-model" and not self.judge_model:
            raise ConfigError("--judge reward-model needs --judge-model: the reward model to score with")
        if self.pairs not in PAIR_CHOICES:
            raise ConfigError(f"--pairs must be one of {', '.join(PAIR_CHOICES)}, got {self.pairs!r}")
        if not 0 <= self.test_size < 1:
            raise ConfigError(f"--test-size must be in [0, 1), got {self.test_size}")

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SelfRewardConfig:
        """Rebuild a stored config; unknown keys are ignored, old names read under their new ones."""
        data = {RENAMED.get(k, k): v for k, v in data.items()}
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def sampling(self) -> dict[str, Any]:
        """The `SamplingConfig` fields, to build another sampler's config (candidate generation) from."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(SamplingConfig)}

    def judge_config(self):
        """The judge's own config dataclass (its entry in the table of judges), from the loop's judge fields."""
        from preflab.labelling.judges.table import JUDGES

        config_cls = JUDGES[self.judge].config
        offered = {
            "batch_size": self.batch_size,
            "n": self.judge_samples,
            "max_new_tokens": self.judge_max_new_tokens,
            "seed": self.seed,
            "method": self.judge_method,
            "conversational": self.judge_conversational,
        }
        names = {f.name for f in dataclasses.fields(config_cls)}
        return config_cls(**{k: v for k, v in offered.items() if k in names})


def loop_settings(
    session: Session, loop: str, loop_options: dict[str, Any], dpo_options: dict[str, Any], default_model: str
):
    """(SelfRewardConfig, DPOTrainConfig) for the next run of a loop.

    An option set on the command line wins; the others are the loop's last
    iteration's, so re-running a bare command resumes or extends a loop with its
    own settings; a new loop takes the defaults.

    Args:
        loop_options, dpo_options: the fields set explicitly, by config.
        default_model: M_0 when neither the options nor the loop name one.
    """
    from preflab.training.config import DPOTrainConfig

    last = (
        session.scalars(
            select(SelfRewardIteration.config)
            .where(SelfRewardIteration.loop == loop)
            .order_by(SelfRewardIteration.iteration.desc())
        ).first()
        or {}
    )
    stored = last.get("loop", {})
    # A loop from before the score judge had methods sampled its scores: it keeps doing so.
    before_methods = {"judge_method": "sampled"} if stored and "judge_method" not in stored else {}
    values = {**before_methods, **{RENAMED.get(k, k): v for k, v in stored.items()}, **loop_options}
    values["model"] = values.get("model") or default_model
    return SelfRewardConfig.from_dict(values), DPOTrainConfig.from_dict({**last.get("dpo", {}), **dpo_options})
