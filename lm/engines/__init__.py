"""Engines: where generating and judging run their model, in this process or on a server.

Two engines answer the same three calls, each over a batch, each in the order asked:

    from preflab.lm.engines import EngineConfig, Generate, Likelihood, Logprobs, Sampling, open_engine

    config = build_config(EngineConfig, options)       # --engine --api-base --model --concurrency ...
    with open_engine(config, sessions, model=name) as engine:
        replies = engine.generate([Generate(prompt, Sampling(256, 0.7, 0.9, seed), index=i)
                                   for prompt in prompts for i in range(n)])         # -> Generation | Failed
        verdicts = engine.top_logprobs([Logprobs(messages, choices=("A", "B"))])    # -> TokenLogprobs | Failed
        p = verdicts[0].choice_logprobs(("A", "B"))    # {"A": log p, "B": log p}, or None: an abstention
        scores = engine.top_logprobs([Logprobs(messages, answer_start="Score: ", choices=tuple("012345"))])
        likely = engine.likelihood([Likelihood(history, reply)])                  # -> ReplyLogprob | Failed
        summary["engine"] = engine.stats.as_dict()      # requests, cache hits, tokens, retries, errors, cost

- `engine.name` is what the model is recorded as: the loaded model's label in process,
  `openai:<served model>` on a server (an annotator name should hold it).
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
  `engine.check_likelihood()` up front to fail even earlier; the transformers engine has none).
- On a server every ask is stored with its answer (`preflab.db.requests`), keyed by what
  was asked, and committed within a second of arriving; each call returns once its
  answers are committed. A re-run, a resumed run or another command asking the same thing
  reads them back (`stats.cache_hits`) instead of paying again. Samples of one prompt are
  told apart by `index`; the seed a server gets is derived from (seed, index).
  Don't hold a write transaction open around a call: on SQLite the store's writer waits for it.
- Generation in process: the asks of one call that share a `Sampling` (seed included) are
  sampled together from that seed, as `preflab.lm.sampling.generate_texts` does; give a
  batch one seed, as generation does today.
- `Logprobs.choices` holds a server that offers structured output to them (vLLM's
  `structured_outputs` choice, a hosted API's JSON schema); elsewhere the reply is read as
  it comes. `answer_start` is continued on vLLM (`continue_final_message`); elsewhere the
  model writes its own start and `choice_logprobs` finds the choice further in (ask for a
  few more `max_tokens`).

Modules: `config` (EngineConfig, EngineStats), `calls` (what is asked and answered),
`local` (transformers), `remote` (openai), `wire` (request bodies and reading answers).
"""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

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
from preflab.lm.engines.config import ENGINES, EngineConfig, EngineStats

__all__ = [
    "ENGINES",
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
    "open_engine",
]


def open_engine(
    config: EngineConfig, sessions: sessionmaker[Session], *, model: str | None = None, cache=None, batch_size: int = 8
):
    """The engine `config` names, ready to call; close it (or use it as a context manager) when done.

    Args:
        model: what `--model` named, where the config's own `model` is not set: for
            transformers, a model version, embedded name, path or hub id, loaded (and
            recorded as a model version) through `preflab.lm.names.load_named_model`;
            on a server, the served model's name.
        cache: models already loaded by the calling job (`preflab.lm.names.ModelCache`).
        batch_size: sequences per forward pass, in process.
    """
    name = config.model or model
    if config.engine == "openai":
        from dataclasses import replace

        from preflab.lm.engines.remote import OpenAIEngine

        return OpenAIEngine(config if config.model else replace(config, model=name), sessions)
    from preflab.lm.engines.local import TransformersEngine
    from preflab.lm.names import load_named_model

    named = load_named_model(sessions, name, cache=cache)
    return TransformersEngine(named.model, named.tokenizer, named.label, batch_size, named.version_id)
