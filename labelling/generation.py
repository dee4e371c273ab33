"""Candidate generation: N sampled responses per prompt, stored as candidates.

Prompts are sampled in batches (left padding, the model's chat template over
every message of a prompt's history: its system prompt and earlier turns). Every
batch is its own transaction, so an interrupted run keeps what it made, and a
re-run only tops each prompt up to N candidates from the same model: a response
already stored (same content hash) is never stored twice, and a prompt left
short by duplicates is sampled again, up to `max_rounds` times.

Sampling goes through an engine (`preflab.lm.engines`): the model in this process,
or an OpenAI-compatible server. Where the engine draws a call's asks together (in
process), a batch of similar lengths shares one seed and one `generate` call, as
always. Where it stores every answer (a server), each sample is its own request,
seeded by its prompt, round and sample index rather than by the batch it happens to
be in, so a re-run (or a run resumed after `kill -9`) asks the same things again and
the request store answers what was asked before, without paying for it twice. A
prompt the server refuses (over its context length) is quarantined with the
server's reason (kept in the request store) and skipped; a sample with no answer
after every retry is left for the next run.

`run_generation` is the `preflab generate` job (open the engine, then generate);
`generate_with` samples on an engine already open, and `generate_candidates`
with a model already loaded.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.db.conversation import Messages, compact, stored_prompt
from preflab.db.models import Candidate, ModelVersion, Prompt
from preflab.db.requests import added_stats
from preflab.db.store import chunks, content_hash, ensure_candidates
from preflab.errors import ConfigError
from preflab.labelling.selection import PromptSelection, prompts_from_file, selected_prompt_ids
from preflab.lm.engines import Engine, EngineConfig, Failed, Generate, Sampling, open_engine
from preflab.lm.names import ModelCache, NamedModel
from preflab.lm.sampling import Generation, SamplingConfig, sample_texts

# Where answers are stored (a server), a call to the engine holds this many of its `concurrency` asks for each
# one in flight, so few wait on the slowest answer of a call; candidates are stored after each call.
ASKS_PER_SLOT = 4


@dataclass
class GenerateConfig(SamplingConfig):
    """How candidates are sampled (defaults from the self-rewarding paper)."""

    batch_size: int = field(default=8, metadata={"help": "Sequences sampled per forward pass."})
    max_rounds: int = field(default=3, metadata={"help": "Sampling rounds for prompts left short by duplicates."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size < 1 or self.max_rounds < 1:
            raise ConfigError("--batch-size and --max-rounds must be at least 1")


@dataclass
class GenerateSummary:
    model: str = ""  # the label stored on the candidates
    prompts: int = 0  # prompts that needed candidates
    stored: int = 0  # new candidates
    duplicates: int = 0  # samples identical to a stored candidate
    empty: int = 0  # samples with no text
    short: int = 0  # prompts still below N after every round
    waiting: int = 0  # selected prompts below N left for a later run by the limit
    tokens: int = 0
    seconds: float = 0.0
    quarantined: int = 0  # prompts a server refused for themselves (over its context length): not asked again
    failed: int = 0  # samples with no answer after every retry: asked again by the next run
    reasons: dict[str, int] = field(default_factory=dict)  # why, with how many samples each
    engine: dict | None = None  # the engine's stats: requests, cache hits, tokens in/out, retries, errors, cost

    def as_dict(self) -> dict:
        out = asdict(self)
        out["tokens_per_s"] = self.tokens / self.seconds if self.seconds else None
        return out


def sample_responses(
    model, tokenizer, prompts: list[str | Messages], config: SamplingConfig, seed: int
) -> list[Generation]:
    """Sample one response per prompt (repeat a prompt to get several).

    Args:
        prompts: a user's message, or the conversation so far as messages: every message
            goes through the model's chat template.
    """
    from preflab.lm.loading import chat_prompt

    return sample_texts(model, tokenizer, [chat_prompt(tokenizer, p) for p in prompts], config, seed)


def prompt_length(prompt: str | Messages) -> int:
    """Characters of a prompt, every message counted: batches hold prompts of similar length."""
    return len(prompt) if isinstance(prompt, str) else sum(len(m["content"]) for m in prompt)


def _batch_seed(base: int, round_: int, rows: list[tuple[int, int]]) -> int:
    """A seed fixed by what the batch holds, so a re-run after a crash draws new samples."""
    key = f"{base}:{round_}:{rows}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:4], "big") & 0x7FFFFFFF


def prompts_needing(
    session: Session, model: str, n: int, prompt_ids: list[int] | None = None
) -> list[tuple[int, str | Messages, int]]:
    """(prompt id, prompt, candidates from `model` already stored) for prompts below n, in id order.

    The prompt is as the model reads it (`compact`): its text, or the whole conversation as messages.
    """
    have = (
        select(Candidate.prompt_id, func.count().label("have"))
        .where(Candidate.model == model)
        .group_by(Candidate.prompt_id)
        .subquery()
    )
    query = (
        select(Prompt.id, Prompt.text, Prompt.messages, func.coalesce(have.c.have, 0))
        .outerjoin(have, have.c.prompt_id == Prompt.id)
        .where(func.coalesce(have.c.have, 0) < n)
        .order_by(Prompt.id)
    )
    parts = (
        [query]
        if prompt_ids is None
        else [query.where(Prompt.id.in_(part)) for part in chunks(sorted(set(prompt_ids)))]
    )
    out = [
        (pid, compact(stored_prompt(text, messages)), count)
        for part in parts
        for pid, text, messages, count in session.execute(part)
    ]
    return sorted(out, key=lambda row: row[0])


def generate_candidates(
    sessions: sessionmaker[Session],
    model,
    tokenizer,
    model_name: str,
    config: GenerateConfig,
    prompt_ids: list[int] | None = None,
    model_version_id: int | None = None,
    reporter: Reporter = SILENT,
) -> GenerateSummary:
    """Top every prompt (or those given) up to `config.n` candidates from a model loaded in this process.

    Args:
        model, tokenizer: the loaded causal LM (see `preflab.lm.names.load_named_model`).
        model_name: the label stored on each candidate (`Candidate.model`).
        model_version_id: the model version stored on each candidate.
    """
    loaded = NamedModel(model_name, model_name, model_version_id, model, tokenizer)
    with open_engine(model=loaded, batch_size=config.batch_size) as engine:
        return generate_with(sessions, engine, config, prompt_ids, model_version_id, reporter)


def generate_with(
    sessions: sessionmaker[Session],
    engine: Engine,
    config: GenerateConfig,
    prompt_ids: list[int] | None = None,
    model_version_id: int | None = None,
    reporter: Reporter = SILENT,
    *,
    label: str | None = None,
) -> GenerateSummary:
    """Top every prompt (or those given) up to `config.n` candidates from `engine`, stored as `engine.name`.

    Args:
        sessions: each call to the engine is stored in its own transaction, so a crash keeps what was made.
        engine: an open engine (`preflab.lm.engines.open_engine`).
        model_version_id: the model version stored on each candidate.
        label: store the candidates under this name instead (the self-rewarding loop's M_{t-1},
            wherever it runs); a server's candidates still say which engine drew them.
    """
    model_name = label or engine.name
    summary = GenerateSummary(model=model_name)
    start = time.perf_counter()
    needed_prompts: set[int] = set()
    refused: set[int] = set()  # prompts the server refused for themselves: not asked again in this run
    reasons: Counter[str] = Counter()
    with sessions.begin() as session:
        todo = prompts_needing(session, model_name, config.n, prompt_ids)
    # The bar counts the candidates still needed and those stored: a round that samples again for duplicates
    # asks more than it counted, and the total would change under it ("0/24", then "25/25").
    with reporter.progress("generating", sum(config.n - have for *_, have in todo)) as advance:
        for round_ in range(config.max_rounds):
            if round_:  # the first round's prompts were read above, for the bar's total
                with sessions.begin() as session:
                    todo = [
                        row
                        for row in prompts_needing(session, model_name, config.n, prompt_ids)
                        if row[0] not in refused
                    ]
            if not todo:
                break
            needed_prompts.update(pid for pid, _, _ in todo)
            for asks in _calls(engine, todo, config, round_):
                results = engine.generate([ask for _, ask, _ in asks])
                for (pid, _, _), result in zip(asks, results):
                    if isinstance(result, Failed):
                        reasons[result.reason] += 1
                        if result.quarantined:
                            refused.add(pid)
                        else:
                            summary.failed += 1
                summary.tokens += sum(r.tokens for r in results if not isinstance(r, Failed))
                before = summary.stored
                with sessions.begin() as session:
                    _store(session, asks, results, model_name, model_version_id, config, summary)
                advance(summary.stored - before)
    if needed_prompts:
        with sessions.begin() as session:
            summary.short = len(prompts_needing(session, model_name, config.n, list(needed_prompts)))
    summary.prompts = len(needed_prompts)
    summary.quarantined = len(refused)
    # The first few reasons: a context-length refusal names each prompt's own length.
    summary.reasons = dict(reasons.most_common(10))
    summary.seconds = time.perf_counter() - start
    summary.engine = engine.spent()
    return summary


def _calls(engine: Engine, todo: list[tuple[int, str | Messages, int]], config: GenerateConfig, round_: int):
    """The asks of each call to the engine: (prompt id, what is asked, how it was sampled, to store)."""
    if not engine.stores_answers:
        # Drawn together: similar lengths share a batch, so little of each forward pass is padding; the batch
        # shares a seed.
        rows = sorted(
            ((pid, prompt, have) for pid, prompt, have in todo for _ in range(config.n - have)),
            key=lambda r: (prompt_length(r[1]), r[0]),
        )
        for batch in chunks(rows, config.batch_size):
            seed = _batch_seed(config.seed, round_, [(pid, have) for pid, _, have in batch])
            sampling = Sampling.of(config, seed)
            yield [
                (pid, Generate(prompt, sampling, index=i), {"seed": seed, "batch_row": i})
                for i, (pid, prompt, _) in enumerate(batch)
            ]
        return
    # Stored: a sample is asked by its prompt, round and index alone, never by its neighbours in a call, so a
    # re-run asks what it asked before and the request store answers. A prompt's samples share a call.
    size = max(config.batch_size, ASKS_PER_SLOT * engine.concurrency)
    call: list = []
    for pid, prompt, have in todo:
        seed = _batch_seed(config.seed, round_, [(pid, have)])
        sampling = Sampling.of(config, seed)
        asks = [
            (pid, Generate(prompt, sampling, index=j), {"seed": seed, "index": j, "engine": engine.name})
            for j in range(have, config.n)
        ]
        if call and len(call) + len(asks) > size:
            yield call
            call = []
        call.extend(asks)
    if call:
        yield call


def run_generation(
    sessions: sessionmaker[Session],
    model_name: str,
    config: GenerateConfig,
    *,
    prompts: str | Path | None = None,
    max_prompts: int | None = None,
    selection: PromptSelection = PromptSelection(),
    engine: EngineConfig | None = None,
    cache: ModelCache | None = None,
    reporter: Reporter = SILENT,
) -> GenerateSummary:
    """The `generate` job: open the engine for `model_name` and top every prompt up to `config.n` candidates.

    Args:
        model_name: `--model NAME` (a model version, embedded name, path or hub id);
            a model seen for the first time is recorded as a base model version.
        prompts: a JSON Lines prompts file to import and generate for (default: every stored prompt).
        max_prompts: generate for the first this many prompts of the file only.
        selection: which stored prompts (by id, split, source, shard), and at most how many of those
            still short of N (in id order, or the file's; within the shard): a re-run goes on with the next ones.
        engine: where the model runs (default: in this process); on a server, `model_name` is
            the served model's, and the candidates are stored as `openai:<served model>`.
        cache: models already loaded by the calling job (the pipeline loads its model once).
    """
    prompt_ids = prompts_from_file(sessions, prompts)[:max_prompts] if prompts else None
    waiting = 0
    # Opening costs nothing: the model is resolved (and recorded) by its name here, loaded or asked only if a
    # prompt needs candidates.
    with open_engine(engine, sessions, model=model_name, cache=cache, batch_size=config.batch_size) as running:
        label = running.name
        with sessions.begin() as session:
            prompt_ids = selected_prompt_ids(session, selection, prompt_ids)
            needing = [pid for pid, _, _ in prompts_needing(session, label, config.n, prompt_ids)]
        if selection.limit is not None:
            if prompt_ids is not None:  # the file's order, or the order the ids were given in
                position = {pid: n for n, pid in enumerate(prompt_ids)}
                needing.sort(key=position.__getitem__)
            waiting = max(len(needing) - selection.limit, 0)
            needing = prompt_ids = needing[: selection.limit]
        if not needing:
            return GenerateSummary(model=label)  # every prompt has its candidates: no model to load, nothing to ask
        summary = generate_with(sessions, running, config, prompt_ids, running.version_id, reporter)
        if running.stores_answers and (summary.engine["requests"] or summary.engine["cache_hits"]):
            with sessions.begin() as session:  # what it asked and cost, beside the judges' (`preflab stats`)
                row = session.scalars(
                    select(ModelVersion).where(ModelVersion.id == running.version_id).with_for_update()
                ).one()
                row.metrics = {
                    **(row.metrics or {}),
                    "engine": added_stats((row.metrics or {}).get("engine"), summary.engine),
                }
    summary.waiting = waiting
    return summary


def _store(
    session: Session,
    asks,
    results: list,
    model_name: str,
    model_version_id: int | None,
    config: GenerateConfig,
    summary: GenerateSummary,
) -> None:
    rows: dict[tuple[int, str], dict] = {}
    for (pid, _, record), result in zip(asks, results):
        if isinstance(result, Failed):  # counted by the caller
            continue
        if not result.text:
            summary.empty += 1
            continue
        key = (pid, content_hash(result.text))
        if key in rows:
            summary.duplicates += 1
            continue
        rows[key] = {
            "text": result.text,
            "model": model_name,
            "model_version_id": model_version_id,
            "sampling": {
                "temperature": config.temperature,
                "top_p": config.top_p,
                "max_new_tokens": config.max_new_tokens,
                **record,
                "tokens": result.tokens,
                "finished": result.finished,
            },
        }
    ids = ensure_candidates(session, rows)
    summary.duplicates += len(rows) - ids.created
    summary.stored += ids.created
