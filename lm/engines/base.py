"""The engine contract: what generating and judging may ask of a model, wherever it runs.

Every engine answers the same three calls over a batch, each in the order asked (`preflab.lm.engines.calls`),
and says where engines differ through its capabilities, as simonw/llm's models carry `can_stream` and
`supports_schema`: a caller asks a capability, never which engine it holds. `open_engine` is the only way
to get one (`preflab.lm.engines`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from preflab.lm.engines.calls import (
    Failed,
    Generate,
    Generation,
    Likelihood,
    Logprobs,
    ReplyLogprob,
    TokenLogprobs,
)
from preflab.lm.engines.config import EngineStats


class Engine(ABC):
    """A model to generate and judge with: in this process, or on a server."""

    # --- capabilities -------------------------------------------------------------------------------------
    # A `Generation` carries `logprob` (its log-probability under what it was sampled from) when asked for it.
    sample_logprobs: bool = False
    # Sampling can be held to the k likeliest tokens (`Sampling.top_k`).
    samples_top_k: bool = False
    # Asks that share a long prefix are worth sending after one that holds it, so that a prefix cache has it (a
    # server's: vLLM's is on by default); an engine that runs a shared prefix once itself wants them all at once.
    prefix_ordering: bool = False
    # Every ask is a request stored with its answer (`preflab.db.requests`) and read back when asked again, so a
    # caller asks each sample by what it is (its own seed, from `Sampling.seed` and `Generate.index`) for a re-run
    # to ask the same, and records what the requests cost. Otherwise asks that share their `Sampling` are drawn
    # together from its seed, and nothing is stored or paid for.
    stores_answers: bool = False
    # Asks worth having in flight at once: a caller batches for this many.
    concurrency: int = 1
    # The currency the engine's prices are given in (None: it costs nothing).
    currency: str | None = None

    # --- what it is ---------------------------------------------------------------------------------------
    name: str  # what the model is recorded as: candidates' model, an AI annotator's name
    version_id: int | None  # the model version it is recorded as (None where it is not recorded)
    stats: EngineStats  # what this engine was asked and what it cost, so far

    def spent(self) -> dict[str, Any]:
        """`stats.as_dict()`, with the currency its prices were given in where it has one."""
        return {**self.stats.as_dict(), **({"currency": self.currency} if self.currency else {})}

    # --- the calls ----------------------------------------------------------------------------------------

    @abstractmethod
    def generate(self, asks: Sequence[Generate]) -> list[Generation | Failed]:
        """One sampled reply per ask."""

    @abstractmethod
    def top_logprobs(self, asks: Sequence[Logprobs]) -> list[TokenLogprobs | Failed]:
        """The first tokens of each greedy reply, each with its top alternatives (held to the ask's choices where
        it has some and the engine can hold them)."""

    @abstractmethod
    def likelihood(self, asks: Sequence[Likelihood]) -> list[ReplyLogprob | Failed]:
        """log p of each reply's tokens after its conversation: the tokens `preflab.lm.replies` names."""

    # --- before anything is asked -------------------------------------------------------------------------

    @abstractmethod
    def check(self) -> None:
        """Get ready before anything is asked or paid for: a model to load is loaded; a server is looked at (a
        wrong key, a model it does not have or a server that does not answer stops here, as `EngineError`)."""

    def offers_json(self) -> bool:
        """Whether a reply can be held to a JSON schema (`Generate.schema`); checked before any paid request."""
        return False

    def check_likelihood(self) -> str:
        """How this engine gives a reply's likelihood, checked before any paid request.

        Raises:
            EngineError: it gives none (a server without prompt log-probabilities).
        """
        return "forward pass"

    # --- letting go ---------------------------------------------------------------------------------------

    @abstractmethod
    def close(self) -> None:
        """Let go of what the engine holds (connections, its thread): commit what it has not."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
