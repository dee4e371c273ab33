"""How `bon sample` samples: the shared sampling config, plus what best-of-n adds to it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from preflab.errors import ConfigError
from preflab.lm.sampling import SamplingConfig


@dataclass
class BonSampleConfig(SamplingConfig):
    """How best-of-n samples: `SamplingConfig`'s fields, plus top-k, the batch size and the chat format.

    `bon sample` starts from `BON_DEFAULTS`: the policy's own distribution (no
    temperature, no truncation), which is the reference of the KL.
    """

    top_k: int = field(default=0, metadata={"help": "Sample from the k likeliest tokens only (0 = off)."})
    batch_size: int = field(default=8, metadata={"help": "Sequences per forward pass (generation and scoring)."})
    head: str | None = field(
        default=None,
        metadata={
            "help": "A multi-objective reward model (train reward --criteria): score the draws by this head; their "
            "rankings, and the estimate, are of its criterion."
        },
    )
    combine: str | None = field(
        default=None,
        metadata={
            "help": "A multi-objective reward model: score each draw by its place (0 … 1) among its prompt's N draws "
            "by this rule over the heads, as export --combine orders (mean, weighted:…, lexicographic:…, agree)."
        },
    )
    conversational: bool = field(
        default=False,
        metadata={
            "help": "Score chat messages even when the reward model has no chat template of its own (one with a "
            "template always reads messages, as it trained on them)."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.top_k < 0:
            raise ConfigError(f"--top-k cannot be negative, got {self.top_k}")
        if self.batch_size < 1:
            raise ConfigError(f"--batch-size must be at least 1, got {self.batch_size}")

    def identity(self) -> dict[str, Any]:
        """The settings that decide what is sampled (batch size only decides how fast; no head or rule: as before
        reward models had heads)."""
        return {
            k: v for k, v in asdict(self).items() if k != "batch_size" and not (k in ("head", "combine") and v is None)
        }


# Best-of-n's defaults: N = 8 draws from the policy's own distribution.
BON_DEFAULTS: dict[str, Any] = {"n": 8, "temperature": 1.0, "top_p": 1.0, "max_new_tokens": 128}
