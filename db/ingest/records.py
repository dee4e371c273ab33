"""Parsing one JSON Lines record (a ranking or a prompt) into what the database stores.

A record that cannot be stored raises `Invalid` with the reason it is
quarantined for. Everything the database could refuse is caught here, so a bad
record never fails the batch around it: NaN and Infinity (not JSON), JSON nested
deeper than the parser allows, text the database cannot hold anywhere in the
record (a NUL, which Postgres text refuses, or a lone UTF-16 surrogate, which is
not text at all: see `unstorable`), and names longer than their columns.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from preflab.db.conversation import Messages, prompt_hash, prompt_messages, reply_hash, reply_messages
from preflab.db.models import OVERALL, AnnotatorKind
from preflab.errors import Invalid

# The widths of the String columns these fields are stored in (db/models/rankings.py).
LIMITS = {"annotator": 300, "model": 300, "source": 200, "id": 200}
KINDS = frozenset(kind.value for kind in AnnotatorKind)


@dataclass
class RankingRecord:
    """A parsed ranking: the prompt and each response as messages (`preflab.db.conversation`)."""

    prompt: Messages
    responses: list[Messages]
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
    details: dict[str, Any] | None = None  # kept on the ranking (a dataset's verdict, score ratio…)
    # (name, the part of the row, reason) of each reply left out of the ranking, which the import quarantines alone
    set_aside: list[tuple[str, Any, str]] = field(default_factory=list)
    assumed: str | None = None  # why the annotator is preflab's assumption, not the dataset's word
    criterion: str = OVERALL  # what the order is by (`Ranking.criterion`)


@dataclass
class PromptRecord:
    prompt: Messages
    responses: list[Messages]
    reference: str | None = None
    models: list[str | None] = field(default_factory=list)
    source: str | None = None
    prompt_hash: str = ""
    response_hashes: list[str] = field(default_factory=list)


def shown(value: Any, width: int = 40) -> str:
    """A value for a quarantine reason: its repr, cut short (a reason must stay one short line)."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


class _Constant(Exception):
    pass


def _refuse_constant(name: str):
    raise _Constant(name)


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def unstorable_text(text: str) -> str | None:
    """Why one string cannot be stored (a NUL, a lone surrogate), or None."""
    if "\x00" in text:
        return "holds a NUL character (\\u0000), which the database cannot store"
    if not text.isascii() and (found := _SURROGATE.search(text)):
        return f"holds a lone UTF-16 surrogate (\\u{ord(found.group()):04x}), which is not text the database can store"
    return None


def _field(where: str, path: tuple[str | int, ...]) -> str:
    parts = [shown(p) if i == 0 and isinstance(p, str) else f"[{shown(p)}]" for i, p in enumerate(path)]
    return " ".join(filter(None, (where, "".join(parts)))) or "the value"


def unstorable(value: Any, where: str = "") -> str | None:
    """Why a parsed JSON value cannot be stored, naming the field; None when every string in it can be.

    Every string at any depth, object keys included, is checked for a NUL (Postgres
    text cannot hold one) and for a lone UTF-16 surrogate ("\\ud800" alone: Python's
    json accepts it, but it cannot be encoded as UTF-8, so neither database can
    store it). A valid pair ("\\ud83d\\ude00") is one character and passes.

    Args:
        value: what `json.loads` (or an HTTP client's `.json()`) returned.
        where: names the value in the reason; the path inside it follows, e.g.
            `unstorable(task["data"], "task data")` -> "task data 'prompt' holds a NUL …".

    Returns:
        The quarantine reason, e.g. "'responses'[2] holds a NUL character (\\u0000),
        which the database cannot store", or None.
    """
    stack: list[tuple[Any, tuple[str | int, ...], bool]] = [(value, (), False)]
    while stack:  # depth-first in document order, without recursion (the value may be deeply nested)
        item, path, is_key = stack.pop()
        if isinstance(item, str):
            problem = unstorable_text(item)
            if problem:
                return f"{'the key ' if is_key else ''}{_field(where, path)} {problem}"
        elif isinstance(item, dict):
            for key, inner in reversed(item.items()):  # a key is checked before its value
                stack += [(inner, (*path, key), False), (key, (*path, key), True)]
        elif isinstance(item, list):
            stack.extend((inner, (*path, i), False) for i, inner in reversed(list(enumerate(item))))
    return None


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


def _decoded(text: str | bytes) -> str:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Invalid(f"not valid UTF-8 (byte 0x{text[exc.start]:02x} at offset {exc.start})") from None
    return text.removeprefix("\ufeff")  # a byte-order mark mid-file: files joined with cat


def load_object(text: str | bytes) -> dict[str, Any]:
    """A JSON object from one line; raises Invalid with the reason it is not one."""
    text = _decoded(text)
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise Invalid(_json_reason(text, exc)) from None
    if not isinstance(data, dict):
        raise Invalid(f"expected a JSON object, got {type(data).__name__}")
    return data


def load_record(line: str | bytes) -> dict[str, Any]:
    """A JSON object every string of which the database can store; raises Invalid naming the field that cannot be."""
    text = _decoded(line)
    try:
        data = load_object(text)
    except Invalid:
        # orjson refuses a lone surrogate and a raw NUL byte without saying where they are: the
        # standard library's parser takes both (not strict: raw control characters), so the field can be named.
        try:
            reason = unstorable(json.loads(text, parse_constant=_refuse_constant, strict=False))
        except (_Constant, ValueError, RecursionError):
            reason = None
        if reason:
            raise Invalid(reason) from None
        raise
    # orjson never returns a lone surrogate, and returns a NUL only from this escape: most lines skip the walk.
    if "\\u0000" in text and (reason := unstorable(data)):
        raise Invalid(reason)
    return data


def _fits(key: str, value: str) -> str:
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
    return _fits(key, value)


def _responses(data: dict, minimum: int) -> tuple[list[Messages], list[str]]:
    """The responses, each as messages (a string is one assistant turn), and their content hashes."""
    responses = data.get("responses", [] if minimum == 0 else None)
    if not isinstance(responses, list):
        raise Invalid("missing 'responses' (a list of strings or of message lists)")
    if len(responses) < minimum:
        raise Invalid(f"fewer than two responses ({len(responses)})")
    turns = [reply_messages(r, f"'responses'[{i}]") for i, r in enumerate(responses)]
    hashes = [reply_hash(t) for t in turns]
    if repeat := first_repeat(hashes):
        raise Invalid(f"responses {repeat[0]} and {repeat[1]} are identical")
    return turns, hashes


def first_repeat(hashes: list[str]) -> tuple[int, int] | None:
    """The indices (earlier, later) of the first hash that repeats an earlier one; None when all differ."""
    seen: dict[str, int] = {}
    for i, h in enumerate(hashes):
        if h in seen:
            return seen[h], i
        seen[h] = i
    return None


def _prompt(data: dict) -> Messages:
    if data.get("prompt") is None:
        raise Invalid("missing 'prompt'")
    return prompt_messages(data["prompt"])


def _models(data: dict, n: int) -> list[str | None]:
    model = data.get("model")
    if model is None:
        return [None] * n
    if isinstance(model, str):
        return [_fits("model", model)] * n
    if isinstance(model, list) and len(model) == n and all(m is None or isinstance(m, str) for m in model):
        return [m if m is None else _fits("model", m) for m in model]
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
    if (
        not isinstance(scores, list)
        or len(scores) != n
        or not all(s is None or (isinstance(s, (int, float)) and not isinstance(s, bool)) for s in scores)
    ):
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
    return _fits("id", str(value))


_CRITERION = re.compile(r"[a-z][a-z0-9_]{0,39}")


def criterion_name(value: Any, what: str = "'criterion'") -> str:
    """A criterion's name as given, checked: lower-case letters, digits and '_', a letter first, 40 at most.

    Raises:
        Invalid: anything else, named in one sentence.
    """
    if value is None:
        return OVERALL
    if not isinstance(value, str) or not _CRITERION.fullmatch(value):
        raise Invalid(
            f"{what} must be a criterion's short name (lower-case letters, digits and '_', a letter first, "
            f"40 at most), not {shown(value)}"
        )
    return value


def parse_ranking(line: str | bytes) -> RankingRecord:
    """Parse one JSON Lines ranking; raises Invalid with the quarantine reason."""
    data = load_record(line)
    prompt = _prompt(data)
    responses, hashes = _responses(data, minimum=2)
    n = len(responses)
    kind = data.get("annotator_kind", "human")
    if not isinstance(kind, str) or kind not in KINDS:
        raise Invalid(f"unknown annotator_kind {shown(kind)} (expected 'human' or 'ai')")
    return RankingRecord(
        prompt=prompt,
        responses=responses,
        tiers=_tiers(data, n),
        annotator=_text(data, "annotator"),
        kind=kind,
        external_id=_external_id(data),
        reference=_text(data, "reference", required=False),
        models=_models(data, n),
        scores=_scores(data, n),
        source=_text(data, "source", required=False),
        prompt_hash=prompt_hash(prompt),
        response_hashes=hashes,
        criterion=criterion_name(data.get("criterion")),
    )


def parse_prompt(line: str | bytes) -> PromptRecord:
    """Parse one JSON Lines prompt (optionally with unranked responses); raises Invalid."""
    data = load_record(line)
    prompt = _prompt(data)
    responses, hashes = _responses(data, minimum=0)
    return PromptRecord(
        prompt=prompt,
        responses=responses,
        reference=_text(data, "reference", required=False),
        models=_models(data, len(responses)),
        source=_text(data, "source", required=False),
        prompt_hash=prompt_hash(prompt),
        response_hashes=hashes,
    )
