"""The likelihood judge: the model's average token log-likelihood of each response.

No judge prompt at all: the model reads the user's prompt in its chat format
and scores how probable each response is, per token (so length is not
penalised). Small instruction models that are near chance as "A or B" judges
still rank a correct factual answer above a wrong one this way.

The prompt is the whole conversation so far (system prompt and earlier turns
through the chat template), so a reply is scored given its history. A reply of
several turns is scored on its assistant turns, each given everything before it
(the user's turns between them are context, not the candidate's words).

The reply's tokens are those a server scores (`preflab.lm.replies`), on any engine: in process
one teacher-forced forward pass, on a server its prompt log-probabilities. A reply a server
refused (over its context length) is an abstention with the server's reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from preflab.db.conversation import assistant_turn
from preflab.errors import ConfigError
from preflab.labelling.judges.base import Judgement
from preflab.labelling.selection import PromptCandidates
from preflab.lm.engines import Engine, Failed, Likelihood


@dataclass
class LikelihoodConfig:
    """How the likelihood judge scores."""

    batch_size: int = field(default=8, metadata={"help": "Responses scored per forward pass."})

    def __post_init__(self):
        if self.batch_size < 1:
            raise ConfigError("--batch-size must be at least 1")


def judge_on(engine: Engine, config: LikelihoodConfig) -> Callable[[list[PromptCandidates]], list[Judgement | None]]:
    """A function from a batch of prompts to their judgements on `engine`: each reply's mean token log-probability
    (None: a prompt a server left unanswered, asked again by the next run)."""

    def judge(items: list[PromptCandidates]) -> list[Judgement | None]:
        asks, owner = [], []
        for k, item in enumerate(items):
            for n, cid in enumerate(item.candidate_ids):
                response = item.reply(n)
                turns = assistant_turn(response) if isinstance(response, str) else list(response)
                for at, turn in enumerate(turns):
                    if turn["role"] == "assistant":
                        asks.append(Likelihood(list(item.history) + turns[:at], turn["content"]))
                        owner.append((k, cid))
        sums: dict = {(k, cid): [0.0, 0, None] for k, item in enumerate(items) for cid in item.candidate_ids}
        missing = set()
        for (k, cid), answer in zip(owner, engine.likelihood(asks)):
            if isinstance(answer, Failed):
                missing.update({k} if not answer.quarantined else set())
                sums[k, cid][2] = answer.reason
                continue
            sums[k, cid][0] += answer.total
            sums[k, cid][1] += answer.tokens
        out: list[Judgement | None] = []
        for k, item in enumerate(items):
            scores, details = {}, {}
            for cid in item.candidate_ids:
                total, n, why = sums[k, cid]
                if why is not None:
                    scores[cid], details[cid] = None, {"abstain": True, "reason": why}
                    continue
                mean = total / n if n else float("-inf")
                scores[cid] = round(mean, 6) if n else None
                details[cid] = {"tokens": n, "sum_logprob": round(mean * n, 4) if n else None}
            out.append(None if k in missing else (scores, details))
        return out

    return judge
