"""The reward-model judge: the score of a one-label sequence-classification model, or of a multi-objective one.

A multi-objective reward model (`preflab train reward --criteria`) scores a reply once per head, its
heads named by their criteria. `--head NAME` ranks by that head alone, and the rankings carry its criterion
(a judge of that criterion); `--combine RULE` orders each prompt's candidates by the export's rule over the
heads (`preflab.db.export.heads`: mean, weighted:…, lexicographic:…, agree), the candidates' scores their
place in that order (0 … 1), and the rankings are `overall`, the one order. One of them is needed for such a
model; a one-label model takes neither.

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

from preflab.db.models import OVERALL
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
    head: str | None = field(
        default=None,
        metadata={
            "help": "A multi-objective reward model: rank by this head alone (its rankings carry its criterion)."
        },
    )
    combine: str | None = field(
        default=None,
        metadata={
            "help": "A multi-objective reward model: order each prompt's candidates by this rule over its heads, as "
            "`export --combine` does (mean, weighted:a=0.7,b=0.3, lexicographic:a,b, agree)."
        },
    )

    def __post_init__(self):
        if self.batch_size < 1:
            raise ConfigError("--batch-size must be at least 1")
        if self.head is not None and self.combine is not None:
            raise ConfigError("give --head for one head or --combine for a rule over them, not both")
        if self.combine is not None:
            from preflab.db.export.rules import parse_rule

            parse_rule(self.combine)  # one sentence for a rule that does not parse, before the model loads

    @property
    def criterion(self) -> str:
        """What its rankings are by: the head read, else `overall` (one head, or the heads combined)."""
        return self.head or OVERALL


def make_judge(model, tokenizer, config: RewardModelConfig):
    from preflab.lm.scoring import exchange, reward_scores, reward_vectors

    read = _heads_reader(model, config)

    def judge(items: list[PromptCandidates]) -> list[Judgement]:
        inputs = [
            exchange(item.history, item.reply(i), config.conversational)
            for item in items
            for i in range(len(item.texts))
        ]
        prompts, replies = [p for p, _ in inputs], [r for _, r in inputs]
        if read is None:
            results = iter(reward_scores(model, tokenizer, prompts, replies, config.batch_size))
        else:
            results = iter(reward_vectors(model, tokenizer, prompts, replies, config.batch_size))
        out = []
        for item in items:
            values = [next(results) for _ in item.candidate_ids]
            scores = values if read is None else read(values)
            details = [{} if read is None else {"heads": [round(v, 6) for v in vector]} for vector in values]
            out.append(
                (
                    {cid: round(score, 6) for cid, score in zip(item.candidate_ids, scores)},
                    dict(zip(item.candidate_ids, details)),
                )
            )
        return out

    return judge


def _heads_reader(model, config: RewardModelConfig):
    """For a multi-objective model, how a prompt's candidates' vectors become their scores; None for one head."""
    from preflab.db.export.heads import heads_reader
    from preflab.lm.loading import head_names

    return heads_reader(head_names(model.config), model.config.num_labels, config.head, config.combine)
