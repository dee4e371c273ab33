"""What a ranking is, whatever file it came in: the identity an import keys it by.

A ranking is stored once per annotator and identity (`rankings.external_id`, within its source):

- the dataset's own id where its rows carry one: Arena's `question_id` (or `id`), oasst2's parent
  message id, SHP's post and comment ids, the UltraFeedback-binarized `prompt_id` with its pair
  (`pair_identity`: which reply was chosen over which), a JSON Lines ranking's `id`;
- else `record_identity`: a hash of what the parsed record means, the format, the annotator, the
  prompt, each reply with its model, tier and score, the verdict kept in the details, and the criterion
  where it is not `overall` (so the ids of rankings stored before criteria stay what they were). The texts
  enter as their content hashes (`preflab.db.conversation`: NFC, stripped), the replies sorted by
  them, and the rest as one canonical JSON (`canonical`: sorted keys, a whole float as its integer,
  a null field as an absent one). So neither the encoding (JSON Lines, Parquet, CSV, Arrow), the
  key order, the spacing, `7` against `7.0`, nor the order the replies are listed in changes it.

The raw record keeps the hash of the bytes received (`raw_records.payload_hash`): that is the
record's identity as received, not the ranking's. The same function, over what the store keeps of a
ranking, re-keys the rankings of stores written before (migration 0013, which holds a frozen copy).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from preflab.db.ingest.records import LIMITS, RankingRecord
from preflab.db.models import OVERALL

__all__ = ["canonical", "canonical_json", "content_identity", "pair_identity", "record_identity"]

# (reply content hash, model, tier, score): one reply of a ranking as its identity sees it
Reply = tuple[str, str | None, int | None, float | None]


def canonical(value: Any) -> Any:
    """A JSON value in the one form its identity hashes: a whole float as its integer, a NaN or null field dropped.

    Lists keep their order and their nulls (a position means something); a dict's null or NaN value is
    dropped (a Parquet struct names every field of its column, null where a row has none).
    """
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return None
        return int(value) if value.is_integer() else value
    if isinstance(value, dict):
        out = {str(k): canonical(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


def canonical_json(value: Any) -> bytes:
    """`canonical(value)` serialised one way: sorted keys, no spaces, UTF-8."""
    return orjson.dumps(canonical(value), option=orjson.OPT_SORT_KEYS)


def content_identity(
    fmt: str,
    kind: str,
    annotator: str,
    prompt: str,
    replies: Iterable[Reply],
    details: dict[str, Any] | None,
    criterion: str = OVERALL,
) -> str:
    """The identity of a ranking without an id of its own: SHA-256 of its meaning, in hex.

    Args:
        fmt: the import's format ("rankings" for JSON Lines rankings, else the dataset format's name).
        prompt: the prompt's content hash; `replies`: (content hash, model, tier, score) of each reply.
        details: the verdict kept beside the tiers (Arena's winner, SHP's score ratio…).
        criterion: what the order is by; hashed only when it is not `overall`.
    """
    body = {
        "format": fmt,
        "annotator": [kind, annotator],
        "prompt": prompt,
        "replies": sorted(([h, m, t, s] for h, m, t, s in replies), key=canonical_json),
        "details": details,
    }
    if criterion != OVERALL:
        body["criterion"] = criterion
    return hashlib.sha256(canonical_json(body)).hexdigest()


def tiers_by_reply(tiers: Sequence[Sequence[int]], n: int) -> list[int | None]:
    """Each reply's tier (0 best), None for a reply left unranked."""
    out: list[int | None] = [None] * n
    for t, tier in enumerate(tiers):
        for index in tier:
            out[index] = t
    return out


def record_identity(fmt: str, record: RankingRecord) -> str:
    """`content_identity` of a parsed record, as the store will hold it (see `write_rankings`)."""
    n = len(record.response_hashes)
    return content_identity(
        fmt,
        record.kind,
        record.annotator,
        record.prompt_hash,
        zip(
            record.response_hashes,
            record.models or [None] * n,
            tiers_by_reply(record.tiers, n),
            record.scores or [None] * n,
        ),
        record.details,
        record.criterion,
    )


def pair_identity(dataset_id: Any, chosen: str, rejected: str) -> str | None:
    """A row id that names a prompt, not its pair, with the pair: `<id>:<16 hex of chosen over rejected>`.

    HuggingFaceH4/ultrafeedback_binarized's `prompt_id` is the prompt's; another file built from the same
    prompts may pair other replies. None when the id is not text or digits, or too long to hold.
    """
    if isinstance(dataset_id, float) and dataset_id.is_integer():
        dataset_id = int(dataset_id)
    if isinstance(dataset_id, bool) or not isinstance(dataset_id, (str, int)) or not str(dataset_id).strip():
        return None
    pair = hashlib.sha256(f"{chosen}>{rejected}".encode()).hexdigest()[:16]
    out = f"{dataset_id}:{pair}"
    return out if len(out) <= LIMITS["id"] else None
