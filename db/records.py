"""Parsing one JSON Lines record (a ranking or a prompt) into what the database stores.

A record that cannot be stored raises `Invalid` with the reason it is
quarantined for. Everything the database could refuse is caught here, so a bad
record never fails the batch around it: NaN and Infinity (not JSON), JSON nested
deeper than the parser allows, text holding a NUL (Postgres text cannot), and
names longer than their columns.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import orjson

from preflab.db.lines import Invalid
from preflab.db.models import AnnotatorKind
from preflab.db.store import content_hash

# The widths of the String columns these fields are stored in (db/models.py).
LIMITS = {"annotator": 300, "model": 300, "source": 200, "id": 200}
KINDS = frozenset(kind.value for kind in AnnotatorKind)


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


def shown(value: Any, width: int = 40) -> str:
    """A value for a quarantine reason: its repr, cut short (a reason must stay one short line)."""
    text = repr(value)
    return text if len(text) <= width else text[:width - 1] + "…"


class _Constant(Exception):
    pass


def _refuse_constant(name: str):
    raise _Constant(name)


def _json_reason(text: str, exc: Exception) -> str:
    message = str(exc).split(":")[0]
    if "depth limit" in message:
        return "not valid JSON (nested more than 1,024 levels deep)"
    try:  # the standard library parser accepts NaN and Infinity: ask it what they were
        json.loads(text, parse_constant=_refuse_constant)
    except _Constant as constant:
        return f"holds {constant}, which JSON does not allow (write null or a number)"
    except (ValueError, RecursionError):
        pass
    return f"not valid JSON ({message})"


def load_object(text: str | bytes) -> dict[str, Any]:
    """A JSON object from one line; raises Invalid with the reason it is not one."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Invalid(f"not valid UTF-8 (byte 0x{text[exc.start]:02x} at offset {exc.start})") from None
    text = text.removeprefix("\ufeff")  # a byte-order mark mid-file: files joined with cat
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise Invalid(_json_reason(text, exc)) from None
    if not isinstance(data, dict):
        raise Invalid(f"expected a JSON object, got {type(data).__name__}")
    return data


def _storable(key: str, value: str) -> str:
    if "\x00" in value:
        raise Invalid(f"'{key}' holds a NUL character (\\u0000), which the database cannot store")
    limit = LIMITS.get(key)
    if limit and len(value) > limit:
        raise Invalid(f"'{key}' is {len(value):,} characters long, over the limit of {limit}")
    return value


def _text(data: dict, key: str, required: bool = True) -> str | None:
    value = data.get(key)
    if value is None:
        if required:
            raise Invalid(f"missing '{key}'")
        return None
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"'{key}' must be a non-empty string")
    return _storable(key, value)


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
        _storable(f"response {i}", r)
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
        return [_storable("model", model)] * n
    if isinstance(model, list) and len(model) == n and all(m is None or isinstance(m, str) for m in model):
        return [m if m is None else _storable("model", m) for m in model]
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
                raise Invalid(f"tier {t} holds {shown(index)}, not an index")
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
    out = [None if s is None else float(s) for s in scores]
    if not all(s is None or math.isfinite(s) for s in out):
        raise Invalid("'scores' must be finite numbers")
    return out


def _external_id(data: dict) -> str | None:
    value = data.get("id")
    if value is None:
        return None
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise Invalid("'id' must be a string or an integer")
    return _storable("id", str(value))


def parse_ranking(line: str | bytes) -> RankingRecord:
    """Parse one JSON Lines ranking; raises Invalid with the quarantine reason."""
    data = load_object(line)
    prompt = _text(data, "prompt")
    responses, hashes = _responses(data, minimum=2)
    n = len(responses)
    kind = data.get("annotator_kind", "human")
    if not isinstance(kind, str) or kind not in KINDS:
        raise Invalid(f"unknown annotator_kind {shown(kind)} (expected 'human' or 'ai')")
    return RankingRecord(
        prompt=prompt, responses=responses, tiers=_tiers(data, n),
        annotator=_text(data, "annotator"), kind=kind, external_id=_external_id(data),
        reference=_text(data, "reference", required=False), models=_models(data, n),
        scores=_scores(data, n), source=_text(data, "source", required=False),
        prompt_hash=content_hash(prompt), response_hashes=hashes,
    )


def parse_prompt(line: str | bytes) -> PromptRecord:
    """Parse one JSON Lines prompt (optionally with unranked responses); raises Invalid."""
    data = load_object(line)
    prompt = _text(data, "prompt")
    responses, hashes = _responses(data, minimum=0)
    return PromptRecord(prompt=prompt, responses=responses, reference=_text(data, "reference", required=False),
                        models=_models(data, len(responses)), source=_text(data, "source", required=False),
                        prompt_hash=content_hash(prompt), response_hashes=hashes)
