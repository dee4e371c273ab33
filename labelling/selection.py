"""Choosing the prompts and candidates that generation and the judges work on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from preflab.db.models import Candidate, Prompt
from preflab.db.store import IN_CHUNK, chunks, content_hash
from preflab.errors import InputError


def prompts_from_file(sessions: sessionmaker[Session], path: str | Path) -> list[int]:
    """Import a JSON Lines prompts file (as `preflab import prompts` does) and return its prompt ids.

    Lines that cannot be used are quarantined with the reason, as on import; a
    file with no usable prompt is an error. The import is checkpointed a batch
    per transaction, as `preflab import` is.
    """
    from preflab.db.ingest import Invalid, import_file, import_prompts_batch, open_jsonl, parse_prompt

    import_file(sessions, path, import_prompts_batch)
    hashes: list[str] = []
    with open_jsonl(path) as handle:
        for line in handle:
            if line.strip():
                try:
                    hashes.append(content_hash(parse_prompt(line).prompt))
                except Invalid:
                    continue
    if not hashes:
        raise InputError(f"{path} holds no usable prompt (see `preflab quarantine list`)")
    with sessions.begin() as session:
        ids = {}
        for part in chunks(list(dict.fromkeys(hashes))):
            ids.update((h, pid) for h, pid in session.execute(
                select(Prompt.content_hash, Prompt.id).where(Prompt.content_hash.in_(part))))
    return [ids[h] for h in dict.fromkeys(hashes)]


@dataclass
class PromptCandidates:
    """One prompt and the candidates a judge ranks for it (id order)."""

    prompt_id: int
    prompt: str
    reference: str | None
    candidate_ids: list[int]
    texts: list[str]


def prompts_with_candidates(session: Session, prompt_ids: list[int] | None = None,
                            candidate_model: str | None = None, min_candidates: int = 2,
                            require_reference: bool = False) -> list[PromptCandidates]:
    """Every prompt (or those given) with at least `min_candidates` candidates, in id order.

    `candidate_model` keeps only the candidates that model generated (the
    self-rewarding loop judges the current model's samples only).
    """
    query = (select(Prompt.id, Prompt.text, Prompt.reference, Candidate.id, Candidate.text)
             .join(Candidate, Candidate.prompt_id == Prompt.id)
             .order_by(Prompt.id, Candidate.id))
    if candidate_model is not None:
        query = query.where(Candidate.model == candidate_model)
    if require_reference:
        query = query.where(Prompt.reference.is_not(None))
    wanted = None if prompt_ids is None else set(prompt_ids)
    if wanted is not None and len(wanted) <= IN_CHUNK:
        query, wanted = query.where(Prompt.id.in_(sorted(wanted))), None
    out: dict[int, PromptCandidates] = {}
    for pid, ptext, reference, cid, ctext in session.execute(query):
        if wanted is not None and pid not in wanted:
            continue
        item = out.setdefault(pid, PromptCandidates(pid, ptext, reference, [], []))
        item.candidate_ids.append(cid)
        item.texts.append(ctext)
    return [item for item in out.values() if len(item.candidate_ids) >= min_candidates]
