"""Candidate generation: N sampled responses per prompt, stored as candidates.

Prompts are sampled in batches (left padding, the model's chat template). Every
batch is its own transaction, so an interrupted run keeps what it made, and a
re-run only tops each prompt up to N candidates from the same model: a response
already stored (same content hash) is never stored twice, and a prompt left
short by duplicates is sampled again, up to `max_rounds` times.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from preflab.db.models import Candidate, Prompt
from preflab.db.store import chunks, content_hash, ensure_candidates
from preflab.errors import InputError


@dataclass
class GenerateConfig:
    """How candidates are sampled (defaults from the self-rewarding paper)."""

    n: int = field(default=4, metadata={"help": "Candidates per prompt (from this model)."})
    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature."})
    top_p: float = field(default=0.9, metadata={"help": "Nucleus sampling probability mass."})
    max_new_tokens: int = field(default=256, metadata={"help": "Longest response, in tokens."})
    batch_size: int = field(default=8, metadata={"help": "Sequences sampled per forward pass."})
    seed: int = field(default=0, metadata={"help": "Base random seed; each batch derives its own."})
    max_rounds: int = field(default=3, metadata={"help": "Sampling rounds for prompts left short by duplicates."})

    def __post_init__(self):
        if self.n < 1:
            raise InputError("n must be at least 1")
        if self.temperature <= 0:
            raise InputError("temperature must be positive")
        if not 0 < self.top_p <= 1:
            raise InputError("top-p must be in (0, 1]")
        if self.max_new_tokens < 1 or self.batch_size < 1 or self.max_rounds < 1:
            raise InputError("max-new-tokens, batch-size and max-rounds must be at least 1")


@dataclass
class Generation:
    text: str
    tokens: int       # generated tokens, the end-of-turn token included
    finished: bool    # ended with an end-of-turn token rather than hitting max_new_tokens


@dataclass
class GenerateSummary:
    prompts: int = 0          # prompts that needed candidates
    stored: int = 0           # new candidates
    duplicates: int = 0       # samples identical to a stored candidate
    empty: int = 0            # samples with no text
    short: int = 0            # prompts still below N after every round
    tokens: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict:
        out = asdict(self)
        out["tokens_per_s"] = self.tokens / self.seconds if self.seconds else None
        return out


def _stop_ids(model, tokenizer) -> set[int]:
    ids = model.generation_config.eos_token_id
    ids = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    ids.update(i for i in (tokenizer.eos_token_id, tokenizer.pad_token_id) if i is not None)
    return ids


def generate_texts(model, tokenizer, texts: list[str], *, max_new_tokens: int, do_sample: bool = True,
                   temperature: float = 0.7, top_p: float = 0.9, seed: int = 0) -> list[Generation]:
    """Continue already formatted texts in one batched `generate` call (left padding)."""
    import torch

    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p} if do_sample else \
        {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    torch.manual_seed(seed)
    with torch.inference_mode():
        out = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id, **sampling)
    stop = _stop_ids(model, tokenizer)
    results = []
    for row in out[:, enc["input_ids"].shape[1]:].tolist():
        end = next((i for i, t in enumerate(row) if t in stop), None)
        kept = row if end is None else row[:end]
        # NUL cannot be stored in a Postgres text column; a sampled one carries no meaning.
        text = tokenizer.decode(kept, skip_special_tokens=True).replace("\x00", "").strip()
        results.append(Generation(text,
                                  len(row) if end is None else end + 1, end is not None))
    return results


def sample_responses(model, tokenizer, prompts: list[str], config: GenerateConfig, seed: int) -> list[Generation]:
    """Sample one response per prompt text (repeat a prompt to get several)."""
    from preflab.training.models import chat_text

    return generate_texts(model, tokenizer, [chat_text(tokenizer, p) for p in prompts],
                          max_new_tokens=config.max_new_tokens, temperature=config.temperature,
                          top_p=config.top_p, seed=seed)


def _batch_seed(base: int, round_: int, rows: list[tuple[int, int]]) -> int:
    """A seed fixed by what the batch holds, so a re-run after a crash draws new samples."""
    key = f"{base}:{round_}:{rows}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:4], "big") & 0x7FFFFFFF


def prompts_needing(session: Session, model: str, n: int, prompt_ids: list[int] | None = None) -> list[tuple[int, str, int]]:
    """(prompt id, text, candidates from `model` already stored) for prompts below n."""
    have = (select(Candidate.prompt_id, func.count().label("have"))
            .where(Candidate.model == model).group_by(Candidate.prompt_id).subquery())
    query = (select(Prompt.id, Prompt.text, func.coalesce(have.c.have, 0))
             .outerjoin(have, have.c.prompt_id == Prompt.id)
             .where(func.coalesce(have.c.have, 0) < n).order_by(Prompt.id))
    if prompt_ids is None:
        return [tuple(r) for r in session.execute(query)]
    out = []
    for part in chunks(sorted(set(prompt_ids))):
        out.extend(tuple(r) for r in session.execute(query.where(Prompt.id.in_(part))))
    return sorted(out)


def generate_candidates(sessions, model, tokenizer, model_name: str, config: GenerateConfig,
                        prompt_ids: list[int] | None = None, model_version_id: int | None = None,
                        progress: Callable[[int], None] | None = None) -> GenerateSummary:
    """Top every prompt (or those given) up to `config.n` candidates from `model_name`.

    Args:
        sessions: a session factory; each batch is written in its own transaction.
        model, tokenizer: the loaded causal LM (see `preflab.training.models.load_causal_lm`).
        model_name: the label stored on each candidate (`Candidate.model`).
        progress: called with the number of samples finished after every batch.
    """
    summary = GenerateSummary()
    start = time.perf_counter()
    needed_prompts: set[int] = set()
    for round_ in range(config.max_rounds):
        with sessions.begin() as session:
            todo = prompts_needing(session, model_name, config.n, prompt_ids)
        if not todo:
            break
        needed_prompts.update(pid for pid, _, _ in todo)
        # Similar lengths share a batch, so little of each forward pass is padding.
        rows = sorted(((pid, text, have) for pid, text, have in todo for _ in range(config.n - have)),
                      key=lambda r: (len(r[1]), r[0]))
        for batch in chunks(rows, config.batch_size):
            seed = _batch_seed(config.seed, round_, [(pid, have) for pid, _, have in batch])
            results = sample_responses(model, tokenizer, [text for _, text, _ in batch], config, seed)
            summary.tokens += sum(r.tokens for r in results)
            with sessions.begin() as session:
                _store(session, batch, results, model_name, model_version_id, config, seed, summary)
            if progress:
                progress(len(batch))
    with sessions.begin() as session:
        summary.short = len(prompts_needing(session, model_name, config.n, list(needed_prompts))) if needed_prompts else 0
    summary.prompts = len(needed_prompts)
    summary.seconds = time.perf_counter() - start
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
