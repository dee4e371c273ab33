"""What an engine is asked, and what it answers: the same on every engine.

Three calls, each over a batch, each answering in the order asked:

- `Generate` -> `Generation` (`preflab.lm.sampling`'s: text, tokens, finished, and its log-probability where
  the engine gives it: `Engine.sample_logprobs`): one sampled reply.
- `Logprobs` -> `TokenLogprobs`: the first tokens of a greedy reply, each with its top alternatives
  and their log-probabilities (the pairwise and score judges read the verdict's token there).
- `Likelihood` -> `ReplyLogprob`: the summed log-probability of a given reply's tokens after
  a conversation (the likelihood judge), and how many tokens it has.

Any answer may instead be `Failed`: the server refused the item itself (over the model's
context length: `quarantined`, stored, never asked again) or gave no answer after every retry
(asked again by the next run). A prompt is a user's message or the conversation so far
(`preflab.db.conversation`): it is sent as messages, and the server applies the chat template.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from preflab.db.conversation import Messages, user_turn
from preflab.lm.forward import logsumexp
from preflab.lm.sampling import Generation, SamplingConfig

__all__ = [
    "Failed",
    "Generate",
    "Generation",
    "Likelihood",
    "Logprobs",
    "ReplyLogprob",
    "Sampling",
    "TokenLogprobs",
    "as_messages",
]


def as_messages(prompt: str | Messages) -> Messages:
    return (
        user_turn(prompt) if isinstance(prompt, str) else [{"role": m["role"], "content": m["content"]} for m in prompt]
    )


@dataclass(frozen=True)
class Sampling:
    """How one reply is sampled. A temperature of 0 is greedy."""

    max_tokens: int = 256
    temperature: float = 0.7
    top_p: float = 1.0
    seed: int = 0
    # Sample from the k likeliest tokens only (0: off), where the engine can (`Engine.samples_top_k`: the OpenAI
    # API has no such parameter); None: as the model's generation config says.
    top_k: int | None = None

    @classmethod
    def of(cls, config: SamplingConfig, seed: int | None = None) -> Sampling:
        return cls(config.max_new_tokens, config.temperature, config.top_p, config.seed if seed is None else seed)


@dataclass
class Generate:
    """One sampled reply to `prompt`.

    `index` tells apart the samples of one prompt: ask for n replies with indices 0..n-1.
    A server gets a seed derived from (`sampling.seed`, `index`), so each sample is its own
    request, stored and reused on its own. In process, the asks of one batch that share
    their sampling (the seed included) are sampled in one `generate` call from that seed.
    """

    prompt: str | Messages
    sampling: Sampling = field(default_factory=Sampling)
    index: int = 0
    # The reply begun for the model ("Task 9:"), continued in process; a server is asked without it (hosted APIs
    # continue no reply), and the model writes its own start.
    answer_start: str = ""
    # Ask for the sample's log-probability under what it was sampled from (where the engine has it).
    logprob: bool = False
    # A JSON schema the reply is held to, on an engine that offers it (`Engine.offers_json`): vLLM's structured
    # output, a hosted API's `response_format`. Elsewhere the reply is sampled as it comes (read it with care).
    schema: dict[str, Any] | None = None


@dataclass
class Logprobs:
    """The first `max_tokens` tokens of a greedy reply, each with its `top_logprobs` alternatives.

    Args:
        answer_start: the reply begins with this text, given rather than generated (the score
            judge's "Score: "); a server continues it (vLLM: `continue_final_message`).
        choices: the replies allowed (a verdict's "A", "B"): in process the reply is held to them (each
            choice's log-probability read from one forward pass), on a server that offers structured
            output too; others are read as they reply (`TokenLogprobs.choice_logprobs`).
    """

    prompt: str | Messages
    answer_start: str = ""
    choices: tuple[str, ...] = ()
    max_tokens: int = 1
    top_logprobs: int = 20


@dataclass
class Likelihood:
    """log p(reply's tokens | the conversation so far), the reply an assistant turn after `prompt`."""

    prompt: str | Messages
    reply: str


@dataclass
class TokenLogprobs:
    """A greedy reply's tokens, and for each its top alternatives: token text -> log-probability."""

    text: str
    tokens: list[str]
    top: list[dict[str, float]]

    @property
    def first(self) -> dict[str, float]:
        return self.top[0] if self.top else {}

    def choice_logprobs(self, choices: Collection[str]) -> dict[str, float] | None:
        """log p of each choice where the reply first says one of them, or None where it says none.

        The reply's first token that is a choice (spaces aside) is where the verdict is read:
        each choice's log-probability sums its spellings among that token's alternatives
        (" A" and "A"); a choice not among them is -inf. A reply that says no choice at all
        cannot be read: None, an abstention, never a guess.
        """
        wanted = set(choices)
        for token, alternatives in zip(self.tokens, self.top):
            if token.strip() in wanted:
                out = {}
                for choice in choices:
                    values = [v for t, v in alternatives.items() if t.strip() == choice]
                    out[choice] = logsumexp(values) if values else float("-inf")
                return out
        return None


@dataclass
class ReplyLogprob:
    total: float  # sum of the reply's token log-probabilities
    tokens: int

    @property
    def mean(self) -> float:
        return self.total / self.tokens if self.tokens else float("-inf")


@dataclass
class Failed:
    """No answer for this item: why, and whether it was refused for itself (and stored as such)."""

    reason: str
    quarantined: bool = False
