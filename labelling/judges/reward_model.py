"""The reward-model judge: the score of a one-label sequence-classification model.

Inputs are tokenized exactly as the reward model was trained on them
(`preflab.lm.scoring`, which follows TRL's RewardTrainer): plain
prompt + response + EOS by default, as preflab exports datasets, or the chat
template with `conversational`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from preflab.errors import ConfigError
from preflab.labelling.judges.base import Judgement
from preflab.labelling.selection import PromptCandidates


@dataclass
class RewardModelConfig:
    """How the reward-model judge reads its inputs."""

    conversational: bool = field(default=False, metadata={
        "help": "Format inputs as chat messages (for reward models trained on conversational exports)."})
    batch_size: int = field(default=8, metadata={"help": "Responses scored per forward pass."})

    def __post_init__(self):
        if self.batch_size < 1:
            raise ConfigError("--batch-size must be at least 1")


def make_judge(model, tokenizer, config: RewardModelConfig):
    from preflab.lm.scoring import reward_scores

    def judge(items: list[PromptCandidates]) -> list[Judgement]:
        prompts = [item.prompt for item in items for _ in item.texts]
        responses = [text for item in items for text in item.texts]
        if config.conversational:
            prompts = [[{"role": "user", "content": p}] for p in prompts]
            responses = [[{"role": "assistant", "content": r}] for r in responses]
        results = iter(reward_scores(model, tokenizer, prompts, responses, config.batch_size))
        out = []
        for item in items:
            scores = {cid: round(next(results), 6) for cid in item.candidate_ids}
            out.append((scores, {cid: {} for cid in item.candidate_ids}))
        return out

    return judge
