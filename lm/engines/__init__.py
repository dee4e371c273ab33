"""Engines: where generating and judging run their model, in this process or on a server.

Two engines answer the same three calls (the `Engine` contract), each over a batch, each in the order asked:

    from preflab.lm.engines import EngineConfig, Generate, Likelihood, Logprobs, Sampling, open_engine

    config = build_config(EngineConfig, options)       # --engine --api-base --model --concurrency ...
    with open_engine(config, sessions, model=name) as engine:
        replies = engine.generate([Generate(prompt, Sampling(256, 0.7, 0.9, seed), index=i)
                                   for prompt in prompts for i in range(n)])         # -> Generation | Failed
        verdicts = engine.top_logprobs([Logprobs(messages, choices=("A", "B"))])    # -> TokenLogprobs | Failed
        p = verdicts[0].choice_logprobs(("A", "B"))    # {"A": log p, "B": log p}, or None: an abstention
        scores = engine.top_logprobs([Logprobs(messages, answer_start="Score: ", choices=tuple("012345"))])
        likely = engine.likelihood([Likelihood(history, reply)])                  # -> ReplyLogprob | Failed
        summary["engine"] = engine.spent()      # requests, cache hits, tokens, retries, errors, cost, currency

- Every engine is an `Engine` (`base`): `name` is what the model is recorded as (the loaded
  model's label in process, `openai:<served model>` on a server: an annotator name should hold
  it), `version_id` its model version, `stats` what it was asked and cost. Where engines differ
  a caller asks a capability, never the engine's kind: `sample_logprobs` (a `Generation` carries
  `logprob`), `samples_top_k`, `prefix_ordering` (asks sharing a prefix are worth sending after
  one that holds it), `stores_answers` (each ask is stored: ask each sample by its own seed, and
  record the spend), `concurrency` (asks to batch for); `check()` and `check_likelihood()` look
  before anything is paid for (no-ops in process).
- A prompt is a user's message or the conversation so far (`preflab.db.conversation`
  messages); a server gets it as messages and applies the chat template, the
  transformers engine applies the tokenizer's (`preflab.lm.loading.chat_prompt`).
- `Failed(reason, quarantined)` stands in for an answer the server would not give: over
  the model's context length (`quarantined`: stored, never asked again; quarantine the
  item with `reason`), or none after every retry (asked again by the next run). The
  transformers engine never fails an item.
- Unrecoverable trouble is an `EngineError` with one sentence, raised before anything more
  is asked: a key the server refuses, a model it does not have (the sentence lists those it
  has), a server that does not answer (named by URL), a server with no prompt
  log-probabilities asked for `likelihood` (raised before any paid request; call
  `engine.check_likelihood()` up front to fail even earlier).
- On a server every ask is stored with its answer (`preflab.db.requests`), keyed by what
  was asked, and committed within a second of arriving; each call returns once its
  answers are committed. A re-run, a resumed run or another command asking the same thing
  reads them back (`stats.cache_hits`) instead of paying again. Samples of one prompt are
  told apart by `index`; the seed a server gets is derived from (seed, index).
  Don't hold a write transaction open around a call: on SQLite the store's writer waits for it.
- Where answers are not stored (in process), the asks of one call that share a `Sampling`
  (seed included) are sampled together from that seed, as `preflab.lm.sampling.generate_texts`
  does: give a batch one seed, as generation does.
- `Logprobs.choices` holds the reply to them: in process each choice's log-probability is read
  from one forward pass (its spellings summed, the asks' shared prefix run once); on a server that
  offers structured output, through it (vLLM's `structured_outputs` choice, a hosted API's JSON
  schema); elsewhere the reply is read as it comes. `answer_start` is continued in process
  and on vLLM (`continue_final_message`); elsewhere the model writes its own start and
  `choice_logprobs` finds the choice further in (ask for a few more `max_tokens`).

Modules: `base` (the `Engine` contract), `config` (EngineConfig, EngineStats), `calls` (what is
asked and answered), `local` (transformers), `remote` (openai), `wire` (request bodies and
reading answers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy.orm import Session, sessionmaker

from preflab.lm.engines.base import Engine
from preflab.lm.engines.calls import (
    Failed,
    Generate,
    Generation,
    Likelihood,
    Logprobs,
    ReplyLogprob,
    Sampling,
    TokenLogprobs,
)
from preflab.lm.engines.config import ENGINES, EngineConfig, EngineStats, asked_a_server

if TYPE_CHECKING:
    from preflab.lm.names import ModelCache, NamedModel

__all__ = [
    "ENGINES",
    "Engine",
    "EngineConfig",
    "EngineStats",
    "Failed",
    "Generate",
    "Generation",
    "Likelihood",
    "Logprobs",
    "ReplyLogprob",
    "Sampling",
    "TokenLogprobs",
    "asked_a_server",
    "engine_model",
    "open_engine",
]


def open_engine(
    config: EngineConfig | None = None,
    sessions: sessionmaker[Session] | None = None,
    *,
    model: str | NamedModel | None = None,
    cache: ModelCache | None = None,
    batch_size: int = 8,
    record: bool = True,
) -> Engine:
    """The engine `config` names (default: in this process), ready to call; close it (or use it as a context
    manager) when done. Opening costs nothing: a model is resolved, loaded or looked at when first needed.

    Args:
        sessions: the store: a server's answers are kept there (`preflab.db.requests`), and a model named
            here is resolved and recorded there.
        model: the model. In process: a `NamedModel` (already loaded, or loaded from its location on first
            use), or a name (a model version, embedded name, path or hub id: `preflab.lm.names.resolve_model`),
            else the config's own `model`. On a server: the config's `model` (the served model's name), else
            this name (a `NamedModel`: its location).
        cache: models already loaded by the calling job (`preflab.lm.names.ModelCache`): one load per job.
        batch_size: sequences per forward pass, in process.
        record: a model seen for the first time is recorded as a model version (`version_id`); judges do not.
    """
    from preflab.lm.names import NamedModel

    config = config or EngineConfig()
    if config.engine == "openai":
        from dataclasses import replace

        from preflab.lm.engines.remote import OpenAIEngine

        if sessions is None:
            raise ValueError("a server's engine keeps its answers in the store: open it with the store's sessions")
        named = model.location if isinstance(model, NamedModel) else model
        return OpenAIEngine(replace(config, model=config.model or named), sessions, record=record)
    from preflab.lm.engines.local import TransformersEngine

    return TransformersEngine(model or config.model, sessions, cache=cache, record=record, batch_size=batch_size)


def engine_model(session: Session, config: EngineConfig, model: str | None, *, record: bool = True):
    """(what the model is recorded as, where the engine finds it, its model version) for `model` on `config`'s
    engine, as `open_engine` names it, without opening anything: in process, `preflab.lm.names.resolve_model`;
    on a server, `openai:<served model>` found under its served name (recorded with `record`)."""
    from preflab.lm.names import model_version_id, resolve_model

    if config.engine == "openai":
        from preflab.lm.engines.remote import served_label

        served = config.model or model or ""
        label = served_label(served)
        return label, served, model_version_id(session, label) if record else None
    return resolve_model(session, model or config.model, record=record)
