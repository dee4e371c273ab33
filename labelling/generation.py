"""Candidate generation: N sampled responses per prompt, stored as candidates.

Prompts are sampled in batches (left padding, the model's chat template over
every message of a prompt's history: its system prompt and earlier turns). Every
batch is its own transaction, so an interrupted run keeps what it made, and a
re-run only tops each prompt up to N candidates from the same model: a response
already stored (same content hash) is never stored twice, and a prompt left
short by duplicates is sampled again, up to `max_rounds` times.

`run_generation` is the `preflab generate` job (load the model by name, then
generate); `generate_candidates` does the sampling with a model already loaded.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.db.conversation import Messages, compact, stored_prompt
from preflab.db.models import Candidate, Prompt
from preflab.db.store import chunks, content_hash, ensure_candidates
from preflab.errors import ConfigError
from preflab.labelling.selection import PromptSelection, prompts_from_file, selected_prompt_ids
from preflab.lm.names import ModelCache, load_named_model, resolve_model
from preflab.lm.sampling import Generation, SamplingConfig, sample_texts


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
    model: str = ""           # the label stored on the candidates
    prompts: int = 0          # prompts that needed candidates
    stored: int = 0           # new candidates
    duplicates: int = 0       # samples identical to a stored candidate
    empty: int = 0            # samples with no text
    short: int = 0            # prompts still below N after every round
    waiting: int = 0          # selected prompts below N left for a later run by the limit
    tokens: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict:
        out = asdict(self)
        out["tokens_per_s"] = self.tokens / self.seconds if self.seconds else None
        return out


def sample_responses(model, tokenizer, prompts: list[str | Messages], config: SamplingConfig,
                     seed: int) -> list[Generation]:
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


def prompts_needing(session: Session, model: str, n: int,
                    prompt_ids: list[int] | None = None) -> list[tuple[int, str | Messages, int]]:
    """(prompt id, prompt, candidates from `model` already stored) for prompts below n, in id order.

    The prompt is as the model reads it (`compact`): its text, or the whole conversation as messages.
    """
    have = (select(Candidate.prompt_id, func.count().label("have"))
            .where(Candidate.model == model).group_by(Candidate.prompt_id).subquery())
    query = (select(Prompt.id, Prompt.text, Prompt.messages, func.coalesce(have.c.have, 0))
             .outerjoin(have, have.c.prompt_id == Prompt.id)
             .where(func.coalesce(have.c.have, 0) < n).order_by(Prompt.id))
    parts = [query] if prompt_ids is None else \
        [query.where(Prompt.id.in_(part)) for part in chunks(sorted(set(prompt_ids)))]
    out = [(pid, compact(stored_prompt(text, messages)), count)
           for part in parts for pid, text, messages, count in session.execute(part)]
    return sorted(out, key=lambda row: row[0])


def generate_candidates(sessions: sessionmaker[Session], model, tokenizer, model_name: str, config: GenerateConfig,
                        prompt_ids: list[int] | None = None, model_version_id: int | None = None,
                        reporter: Reporter = SILENT) -> GenerateSummary:
    """Top every prompt (or those given) up to `config.n` candidates from `model_name`.

    Args:
        sessions: each batch is written in its own transaction, so a crash keeps what was made.
        model, tokenizer: the loaded causal LM (see `preflab.lm.names.load_named_model`).
        model_name: the label stored on each candidate (`Candidate.model`).
        model_version_id: the model version stored on each candidate.
    """
    summary = GenerateSummary(model=model_name)
    start = time.perf_counter()
    needed_prompts: set[int] = set()
    with sessions.begin() as session:
        todo = prompts_needing(session, model_name, config.n, prompt_ids)
    with reporter.progress("generating", sum(config.n - have for *_, have in todo)) as advance:
        for round_ in range(config.max_rounds):
            if round_:  # the first round's prompts were read above, for the bar's total
                with sessions.begin() as session:
                    todo = prompts_needing(session, model_name, config.n, prompt_ids)
            if not todo:
                break
            needed_prompts.update(pid for pid, _, _ in todo)
            # Similar lengths share a batch, so little of each forward pass is padding.
            rows = sorted(((pid, prompt, have) for pid, prompt, have in todo for _ in range(config.n - have)),
                          key=lambda r: (prompt_length(r[1]), r[0]))
            for batch in chunks(rows, config.batch_size):
                seed = _batch_seed(config.seed, round_, [(pid, have) for pid, _, have in batch])
                results = sample_responses(model, tokenizer, [prompt for _, prompt, _ in batch], config, seed)
                summary.tokens += sum(r.tokens for r in results)
                with sessions.begin() as session:
                    _store(session, batch, results, model_name, model_version_id, config, seed, summary)
                advance(len(batch))
    if needed_prompts:
        with sessions.begin() as session:
            summary.short = len(prompts_needing(session, model_name, config.n, list(needed_prompts)))
    summary.prompts = len(needed_prompts)
    summary.seconds = time.perf_counter() - start
    return summary


def run_generation(sessions: sessionmaker[Session], model_name: str, config: GenerateConfig, *,
                   prompts: str | Path | None = None, max_prompts: int | None = None,
                   selection: PromptSelection = PromptSelection(),
                   cache: ModelCache | None = None, reporter: Reporter = SILENT) -> GenerateSummary:
    """The `generate` job: load `model_name` and top every prompt up to `config.n` candidates.

    Args:
        model_name: `--model NAME` (a model version, embedded name, path or hub id);
            a model seen for the first time is recorded as a base model version.
        prompts: a JSON Lines prompts file to import and generate for (default: every stored prompt).
        max_prompts: generate for the first this many prompts of the file only.
        selection: which stored prompts (by id, split, source, shard), and at most how many of those
            still short of N (in id order, or the file's; within the shard): a re-run goes on with the next ones.
        cache: models already loaded by the calling job (the pipeline loads its model once).
    """
    prompt_ids = prompts_from_file(sessions, prompts)[:max_prompts] if prompts else None
    waiting = 0
    with sessions.begin() as session:
        prompt_ids = selected_prompt_ids(session, selection, prompt_ids)
        label = resolve_model(session, model_name)[0]
        needing = [pid for pid, _, _ in prompts_needing(session, label, config.n, prompt_ids)]
    if selection.limit is not None:
        if prompt_ids is not None:  # the file's order, or the order the ids were given in
            position = {pid: n for n, pid in enumerate(prompt_ids)}
            needing.sort(key=position.__getitem__)
        waiting = max(len(needing) - selection.limit, 0)
        needing = prompt_ids = needing[:selection.limit]
    if not needing:
        return GenerateSummary(model=label)  # every prompt has its candidates: no model to load
    named = load_named_model(sessions, model_name, cache=cache)
    summary = generate_candidates(sessions, named.model, named.tokenizer, named.label, config, prompt_ids,
                                  named.version_id, reporter)
    summary.waiting = waiting
    return summary


def _store(session: Session, batch, results: list[Generation], model_name: str, model_version_id: int | None,
           config: GenerateConfig, seed: int, summary: GenerateSummary) -> None:
    rows: dict[tuple[int, str], dict] = {}
    for index, ((pid, _, _), result) in enumerate(zip(batch, results)):
        if not result.text:
            summary.empty += 1
            continue
        key = (pid, content_hash(result.text))
        if key in rows:
            summary.duplicates += 1
            continue
        rows[key] = {"text": result.text, "model": model_name, "model_version_id": model_version_id,
                     "sampling": {"temperature": config.temperature, "top_p": config.top_p,
                                  "max_new_tokens": config.max_new_tokens, "seed": seed, "batch_row": index,
                                  "tokens": result.tokens, "finished": result.finished}}
    ids = ensure_candidates(session, rows)
    summary.duplicates += len(rows) - ids.created
    summary.stored += ids.created
