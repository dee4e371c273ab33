"""The reward-model judge: the score of a one-label sequence-classification model.

Inputs are tokenized exactly as the reward model was trained on them
(`preflab.lm.scoring`, which follows TRL's RewardTrainer): a model with a chat
template of its own reads chat messages, as training gives it; one without reads
plain prompt + response + EOS, or its stand-in template with `conversational`. A
prompt that is a conversation (or a reply of several turns) always goes through
the chat template, so the score is of the reply given the whole history
(`preflab.lm.scoring.exchange`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from preflab.errors import ConfigError
from preflab.labelling.judges.base import Judgement
from preflab.labelling.selection import PromptCandidates


@dataclass
class RewardModelConfig:
    """How the reward-model judge reads its inputs."""

    conversational: bool = field(
        default=False,
        metadata={
            "help": "Format inputs as chat messages even when the model has no chat template of its own (one with "
            "a template always reads messages, as it trained on them)."
        },
    )
    batch_size: int = field(default=8, metadata={"help": "Responses scored per forward pass."})

    def __post_init__(self):
        if self.batch_size < 1:
            raise ConfigError("--batch-size must be at least 1")


def make_judge(model, tokenizer, config: RewardModelConfig):
    from preflab.lm.scoring import exchange, reward_scores

    def judge(items: list[PromptCandidates]) -> list[Judgement]:
        inputs = [
            exchange(item.history, item.reply(i), config.conversational)
            for item in items
            for i in range(len(item.texts))
        ]
        results = iter(
            reward_scores(model, tokenizer, [p for p, _ in inputs], [r for _, r in inputs], config.batch_size)
        )
        out = []
        for item in items:
            scores = {cid: round(next(results), 6) for cid in item.candidate_ids}
            out.append((scores, {cid: {} for cid in item.candidate_ids}))
        return out

    return judge
