"""The likelihood judge: the model's average token log-likelihood of each response.

No judge prompt at all: the model reads the user's prompt in its chat format
and scores how probable each response is, per token (so length is not
penalised). Small instruction models that are near chance as "A or B" judges
still rank a correct factual answer above a wrong one this way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from preflab.errors import ConfigError
from preflab.labelling.judges.base import Judgement
from preflab.labelling.judges.forward import response_logprobs
from preflab.labelling.selection import PromptCandidates


@dataclass
class LikelihoodConfig:
    """How the likelihood judge scores."""

    batch_size: int = field(default=8, metadata={"help": "Responses scored per forward pass."})

    def __post_init__(self):
        if self.batch_size < 1:
            raise ConfigError("--batch-size must be at least 1")


def mean_logprobs(model, tokenizer, prompts: list[str], responses: list[str], batch_size: int = 8) -> list[tuple[float, int]]:
    """(mean log p per response token, tokens) for each (prompt, response)."""
    from preflab.lm.loading import chat_text

    sums = response_logprobs(model, tokenizer, [chat_text(tokenizer, p) for p in prompts], responses, batch_size)
    return [(total / n if n else float("-inf"), n) for total, n in sums]


def make_judge(model, tokenizer, config: LikelihoodConfig):
    def judge(items: list[PromptCandidates]) -> list[Judgement]:
        prompts = [item.prompt for item in items for _ in item.texts]
        responses = [text for item in items for text in item.texts]
        results = iter(mean_logprobs(model, tokenizer, prompts, responses, config.batch_size))
        out = []
        for item in items:
            scores, details = {}, {}
            for cid in item.candidate_ids:
                mean, n = next(results)
                scores[cid] = round(mean, 6) if n else None
                details[cid] = {"tokens": n, "sum_logprob": round(mean * n, 4) if n else None}
            out.append((scores, details))
        return out

    return judge
