"""The likelihood judge: the model's average token log-likelihood of each response.

No judge prompt at all: the model reads the user's prompt in its chat format
and scores how probable each response is, per token (so length is not
penalised). Small instruction models that are near chance as "A or B" judges
still rank a correct factual answer above a wrong one this way.

The prompt is the whole conversation so far (system prompt and earlier turns
through the chat template), so a reply is scored given its history. A reply of
several turns is scored on its assistant turns, each given everything before it
(the user's turns between them are context, not the candidate's words).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from preflab.db.conversation import Messages, assistant_turn, user_turn
from preflab.errors import ConfigError
from preflab.labelling.judges.base import Judgement
from preflab.labelling.selection import PromptCandidates
from preflab.lm.forward import response_logprobs


@dataclass
class LikelihoodConfig:
    """How the likelihood judge scores."""

    batch_size: int = field(default=8, metadata={"help": "Responses scored per forward pass."})

    def __post_init__(self):
        if self.batch_size < 1:
            raise ConfigError("--batch-size must be at least 1")


def mean_logprobs(
    model, tokenizer, prompts: Sequence[str | Messages], responses: Sequence[str | Messages], batch_size: int = 8
) -> list[tuple[float, int]]:
    """(mean log p per response token, tokens) for each (prompt, response).

    Args:
        prompts: a user's message, or the conversation so far (messages ending with the user's).
        responses: a reply's text, or its messages (assistant turns scored, each after all before it).
    """
    contexts, texts, owner = [], [], []
    for n, (prompt, response) in enumerate(zip(prompts, responses)):
        history = user_turn(prompt) if isinstance(prompt, str) else list(prompt)
        turns = assistant_turn(response) if isinstance(response, str) else list(response)
        for k, turn in enumerate(turns):
            if turn["role"] == "assistant":
                # As messages: rendered with the reply as its open last turn, as a server renders it.
                contexts.append(history + turns[:k])
                texts.append(turn["content"])
                owner.append(n)
    sums = [[0.0, 0] for _ in prompts]
    for n, (total, tokens) in zip(owner, response_logprobs(model, tokenizer, contexts, texts, batch_size)):
        sums[n][0] += total
        sums[n][1] += tokens
    return [(total / n if n else float("-inf"), n) for total, n in sums]


def make_judge(model, tokenizer, config: LikelihoodConfig):
    def judge(items: list[PromptCandidates]) -> list[Judgement]:
        prompts = [item.history for item in items for _ in item.texts]
        responses = [item.reply(i) for item in items for i in range(len(item.texts))]
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
