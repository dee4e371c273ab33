"""Import rankings and prompts from JSON Lines, a batch per transaction.

Each line is stored raw first; then parsed; a line that cannot be used is
quarantined with the reason and the rest of the batch still imports. A ranking
is identified by its `id` (or, without one, the line's hash) and its annotator,
so importing a file twice, or an overlapping file, adds nothing twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import orjson
from sqlalchemy.orm import Session, sessionmaker

from preflab.db.bulk import insert_rows, lookup
from preflab.db.models import AnnotatorKind, Ranking, RankingItem, RawStatus
from preflab.db.store import (
    content_hash,
    ensure_annotators,
    ensure_candidates,
    ensure_prompts,
    payload_hash,
    quarantine,
    store_raw,
)
from preflab.console import SILENT, Reporter
from preflab.errors import InputError

BATCH_LINES = 5000


class Invalid(ValueError):
    """A record that cannot be imported; the message is the quarantine reason."""


@dataclass
class ImportSummary:
    read: int = 0
    imported: int = 0
    duplicates: int = 0
    quarantined: int = 0
    prompts: int = 0
    candidates: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def add(self, other: "ImportSummary") -> None:
        for name in ("read", "imported", "duplicates", "quarantined", "prompts", "candidates"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for reason, n in other.reasons.items():
            self.reasons[reason] = self.reasons.get(reason, 0) + n

    def as_dict(self) -> dict[str, Any]:
        return {"read": self.read, "imported": self.imported, "duplicates": self.duplicates,
                "quarantined": self.quarantined, "new_prompts": self.prompts,
                "new_candidates": self.candidates}


@dataclass
class RankingRecord:
    prompt: str
    responses: list[str]
    tiers: list[list[int]]
    annotator: str
    kind: str
    external_id: str | None
    reference: str | None = None
    models: list[str | None] = field(default_factory=list)
    scores: list[float | None] | None = None
    source: str | None = None
    prompt_hash: str = ""
    response_hashes: list[str] = field(default_factory=list)


@dataclass
class PromptRecord:
    prompt: str
    responses: list[str]
    reference: str | None = None
    models: list[str | None] = field(default_factory=list)
    source: str | None = None
    prompt_hash: str = ""
    response_hashes: list[str] = field(default_factory=list)


# --- parsing ---------------------------------------------------------------------------

def _load_object(line: str) -> dict[str, Any]:
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise Invalid(f"not valid JSON ({str(exc).split(':')[0]})") from None
    if not isinstance(data, dict):
        raise Invalid(f"expected a JSON object, got {type(data).__name__}")
    return data


def _text(data: dict, key: str, required: bool = True) -> str | None:
    value = data.get(key)
    if value is None:
        if required:
            raise Invalid(f"missing '{key}'")
        return None
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"'{key}' must be a non-empty string")
    return value


def _responses(data: dict, minimum: int) -> tuple[list[str], list[str]]:
    """The responses and their content hashes."""
    responses = data.get("responses", [] if minimum == 0 else None)
    if not isinstance(responses, list):
        raise Invalid("missing 'responses' (a list of strings)")
    if len(responses) < minimum:
        raise Invalid(f"fewer than two responses ({len(responses)})")
    for i, r in enumerate(responses):
        if not isinstance(r, str) or not r.strip():
            raise Invalid(f"response {i} is not a non-empty string")
    hashes = [content_hash(r) for r in responses]
    seen: dict[str, int] = {}
    for i, h in enumerate(hashes):
        if h in seen:
            raise Invalid(f"responses {seen[h]} and {i} are identical")
        seen[h] = i
    return responses, hashes


def _models(data: dict, n: int) -> list[str | None]:
    model = data.get("model")
    if model is None:
        return [None] * n
    if isinstance(model, str):
        return [model] * n
    if isinstance(model, list) and len(model) == n and all(m is None or isinstance(m, str) for m in model):
        return model
    raise Invalid(f"'model' must be a string or a list of {n} strings")


def _tiers(data: dict, n: int) -> list[list[int]]:
    ranking = data.get("ranking")
    if not isinstance(ranking, list) or not ranking:
        raise Invalid("missing 'ranking' (a list of tiers of response indices, best first)")
    seen: dict[int, int] = {}
    tiers: list[list[int]] = []
    for t, tier in enumerate(ranking):
        if isinstance(tier, int) and not isinstance(tier, bool):
            tier = [tier]  # a bare index is a tier of one
        if not isinstance(tier, list) or not tier:
            raise Invalid(f"tier {t} must be a non-empty list of indices")
        for index in tier:
            if not isinstance(index, int) or isinstance(index, bool):
                raise Invalid(f"tier {t} holds {index!r}, not an index")
            if not 0 <= index < n:
                raise Invalid(f"index {index} out of range for {n} responses")
            if index in seen:
                raise Invalid(f"index {index} appears in tiers {seen[index]} and {t}")
            seen[index] = t
        tiers.append(list(tier))
    return tiers


def _scores(data: dict, n: int) -> list[float | None] | None:
    scores = data.get("scores")
    if scores is None:
        return None
    if (not isinstance(scores, list) or len(scores) != n
            or not all(s is None or (isinstance(s, (int, float)) and not isinstance(s, bool)) for s in scores)):
        raise Invalid(f"'scores' must be a list of {n} numbers")
    return [None if s is None else float(s) for s in scores]


def parse_ranking(line: str) -> RankingRecord:
    """Parse one JSON Lines ranking; raises Invalid with the quarantine reason."""
    data = _load_object(line)
    prompt = _text(data, "prompt")
    responses, hashes = _responses(data, minimum=2)
    n = len(responses)
    kind = data.get("annotator_kind", "human")
    if kind not in {k.value for k in AnnotatorKind}:
        raise Invalid(f"unknown annotator_kind {kind!r} (expected 'human' or 'ai')")
    external_id = data.get("id")
    if external_id is not None and not isinstance(external_id, (str, int)):
        raise Invalid("'id' must be a string or an integer")
    return RankingRecord(
        prompt=prompt, responses=responses, tiers=_tiers(data, n),
        annotator=_text(data, "annotator"), kind=kind,
        external_id=None if external_id is None else str(external_id),
        reference=_text(data, "reference", required=False), models=_models(data, n),
        scores=_scores(data, n), source=_text(data, "source", required=False),
        prompt_hash=content_hash(prompt), response_hashes=hashes,
    )


def parse_prompt(line: str) -> PromptRecord:
    data = _load_object(line)
    prompt = _text(data, "prompt")
    responses, hashes = _responses(data, minimum=0)
    return PromptRecord(prompt=prompt, responses=responses, reference=_text(data, "reference", required=False),
                        models=_models(data, len(responses)), source=_text(data, "source", required=False),
                        prompt_hash=content_hash(prompt), response_hashes=hashes)


# --- reading files ----------------------------------------------------------------------

def read_lines(handle: TextIO, batch: int = BATCH_LINES) -> Iterator[list[tuple[str, str]]]:
    """Yield batches of (line number, line) without holding the whole file."""
    out: list[tuple[str, str]] = []
    for number, line in enumerate(handle, start=1):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        out.append((str(number), line))
        if len(out) >= batch:
            yield out
            out = []
    if out:
        yield out


def open_jsonl(path: str | Path) -> TextIO:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path} is not a file")
    return path.open(encoding="utf-8", errors="surrogateescape")


def count_lines(path: str | Path) -> int:
    """The non-blank lines of a JSON Lines file (the total of a progress bar)."""
    with open_jsonl(path) as handle:
        return sum(1 for line in handle if line.strip())


# --- writing ----------------------------------------------------------------------------

def _store_prompts_and_candidates(session: Session, records: list[tuple[Any, str, int]],
                                  summary: ImportSummary):
    """Get or create the prompts and candidates of parsed records; returns the id maps."""
    prompt_rows: dict[str, dict[str, Any]] = {}
    for rec, _, _ in records:
        h = rec.prompt_hash
        row = prompt_rows.setdefault(h, {"text": rec.prompt, "source": rec.source, "reference": rec.reference})
        if row["reference"] is None and rec.reference:
            row["reference"] = rec.reference
    prompt_ids = ensure_prompts(session, prompt_rows)
    summary.prompts += prompt_ids.created

    cand_rows: dict[tuple[int, str], dict[str, Any]] = {}
    for rec, _, _ in records:
        pid = prompt_ids[rec.prompt_hash]
        for text, h, model in zip(rec.responses, rec.response_hashes, rec.models):
            cand_rows.setdefault((pid, h), {"text": text, "model": model})
    cand_ids = ensure_candidates(session, cand_rows)
    summary.candidates += cand_ids.created
    return prompt_ids, cand_ids


def _parse_batch(session: Session, batch: list[tuple[str, str]], source: str, origin: str,
                 parse: Callable[[str], Any], summary: ImportSummary) -> list[tuple[Any, str, int]]:
    """Store the batch raw, parse it, quarantine what fails.

    Returns (record, payload hash, raw record id) for every line that parsed.
    """
    raw = store_raw(session, source, origin, batch)
    reasons: dict[int, str] = {}
    parsed: list[tuple[Any, str, int]] = []
    seen: set[str] = set()
    for _, line in batch:
        h = payload_hash(line)
        raw_id, status = raw[h]
        summary.read += 1
        try:
            record = parse(line)
        except Invalid as exc:
            if status == RawStatus.ok.value:
                reasons[raw_id] = str(exc)
            summary.quarantined += 1
            summary.reasons[str(exc)] = summary.reasons.get(str(exc), 0) + 1
            continue
        if h in seen:  # the very same line twice in one batch
            summary.duplicates += 1
            continue
        seen.add(h)
        parsed.append((record, h, raw_id))
    quarantine(session, reasons)
    return parsed


def import_rankings_batch(session: Session, batch: list[tuple[str, str]], origin: str,
                          source: str = "import") -> ImportSummary:
    """Import one batch of JSON Lines rankings inside the caller's transaction."""
    summary = ImportSummary()
    parsed = _parse_batch(session, batch, "import:rankings", origin, parse_ranking, summary)
    if not parsed:
        return summary
    prompt_ids, cand_ids = _store_prompts_and_candidates(session, parsed, summary)
    annotator_ids = ensure_annotators(session, {
        (rec.kind, rec.annotator): ({"judge_kind": "import"} if rec.kind == "ai" else {}) for rec, _, _ in parsed
    })

    keyed: dict[tuple[int, str], tuple[RankingRecord, int]] = {}
    for rec, h, raw_id in parsed:
        key = (annotator_ids[(rec.kind, rec.annotator)], rec.external_id or h)
        if key in keyed:
            summary.duplicates += 1
            continue
        keyed[key] = (rec, raw_id)
    existing = {(aid, ext) for aid, ext, src in lookup(
        session, Ranking.__table__, ("annotator_id", "external_id", "source"), "external_id",
        [ext for _, ext in keyed]) if src == source}
    existing &= set(keyed)
    summary.duplicates += len(existing)
    new = [(key, rec, raw_id) for key, (rec, raw_id) in keyed.items() if key not in existing]
    if not new:
        return summary

    ranking_rows = []
    items_per_ranking = []
    for (annotator_id, external_id), rec, raw_id in new:
        pid = prompt_ids[rec.prompt_hash]
        cids = [cand_ids[(pid, h)] for h in rec.response_hashes]
        items = {}
        for position, cid in enumerate(cids):
            items[cid] = {"candidate_id": cid, "tier": None, "shown_position": position,
                          "score": rec.scores[position] if rec.scores else None}
        for t, tier in enumerate(rec.tiers):
            for index in tier:
                items[cids[index]]["tier"] = t
        ranking_rows.append({
            "prompt_id": pid, "annotator_id": annotator_id, "source": source, "external_id": external_id,
            "version": 1, "status": "valid", "n_tiers": len(rec.tiers), "same_as_shown": False,
            "raw_record_id": raw_id,
        })
        items_per_ranking.append(list(items.values()))
    insert_rows(session, Ranking.__table__, ranking_rows)
    ids = {(aid, ext): rid for rid, aid, ext, src, version in lookup(
        session, Ranking.__table__, ("id", "annotator_id", "external_id", "source", "version"), "external_id",
        [row["external_id"] for row in ranking_rows]) if src == source and version == 1}
    item_rows = [dict(item, ranking_id=ids[(row["annotator_id"], row["external_id"])])
                 for row, items in zip(ranking_rows, items_per_ranking) for item in items]
    insert_rows(session, RankingItem.__table__, item_rows)
    summary.imported += len(ranking_rows)
    return summary


def import_prompts_batch(session: Session, batch: list[tuple[str, str]], origin: str) -> ImportSummary:
    """Import one batch of JSON Lines prompts (optionally with unranked responses)."""
    summary = ImportSummary()
    parsed = _parse_batch(session, batch, "import:prompts", origin, parse_prompt, summary)
    if parsed:
        _store_prompts_and_candidates(session, parsed, summary)
        summary.imported += len(parsed)
    return summary


def import_file(sessions: sessionmaker[Session], path: str | Path,
                importer: Callable[[Session, list[tuple[str, str]], str], ImportSummary],
                reporter: Reporter = SILENT, batch_lines: int = BATCH_LINES) -> ImportSummary:
    """Import a JSON Lines file a batch per transaction; a crash keeps the batches done."""
    total = ImportSummary()
    origin = str(Path(path).resolve())
    lines = count_lines(path) if reporter.enabled else None  # a second read, only for the bar
    with open_jsonl(path) as handle, reporter.progress(f"importing {Path(path).name}", lines) as advance:
        for batch in read_lines(handle, batch_lines):
            with sessions.begin() as session:
                total.add(importer(session, batch, origin))
            advance(len(batch))
    return total


def iter_jsonl(records: Iterable[dict[str, Any]]) -> Iterator[str]:
    """Serialise records as JSON Lines (for tests, samples and the benchmark)."""
    for record in records:
        yield json.dumps(record, ensure_ascii=False)
