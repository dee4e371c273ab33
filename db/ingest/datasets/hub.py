"""Rows through `datasets.load_dataset`: a Hugging Face Hub dataset id, a folder of data files, a CSV file.

Streamed; under `HF_HUB_OFFLINE=1` a Hub id is read from the local cache, as `datasets` does offline.
Online, the Hub is asked once first (`_hub_unreachable`): with no network, `huggingface_hub` retries
for 25 s before failing, so an unreachable Hub stops the import at once, in one line saying to set
HF_HUB_OFFLINE=1 or to give a local path; the loading itself is `datasets`' own, unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from preflab.db.ingest.datasets.rows import Row, Source, batch_rows
from preflab.errors import InputError

_ARROW_BATCH = 1024
HUB_PROBE_SECONDS = 5.0  # how long the one request that tells whether the Hub can be reached may take


def hub_source(
    name: str, split: str | None, origin: str | None = None, options: dict[str, Any] | None = None
) -> Source:
    """Rows through `datasets.load_dataset(name, **options)`: streamed; offline (`HF_HUB_OFFLINE=1`) from the cache.

    A folder of data files goes this way too, so `datasets` names its splits (from file names, or the
    `configs` of its README) as it would for the same files on the Hub; and a CSV file (`name` "csv").
    """
    import datasets
    from huggingface_hub import constants

    streaming = origin is not None or not constants.HF_HUB_OFFLINE
    if origin is None and not constants.HF_HUB_OFFLINE and (reason := _hub_unreachable(name)):
        raise InputError(
            f"{name} cannot be loaded: the Hugging Face Hub ({constants.ENDPOINT}) cannot be reached "
            f"({reason}); set HF_HUB_OFFLINE=1 to read it from the local cache, or give a local path"
        )
    try:
        loaded = datasets.load_dataset(name, split=split, streaming=streaming, **(options or {}))
    except ValueError as exc:
        if split is not None and "split" in str(exc).lower():
            raise InputError(f"{name} has no split {split!r} ({str(exc).splitlines()[0]})") from None
        raise InputError(f"{name} cannot be loaded by datasets: {str(exc).splitlines()[0]}") from None
    except Exception as exc:  # datasets raises many kinds (DatasetNotFoundError, ConnectionError, FileNotFoundError…)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        offline = (
            " (HF_HUB_OFFLINE is set: only a dataset in the local cache can be loaded)"
            if constants.HF_HUB_OFFLINE and origin is None
            else ""
        )
        raise InputError(f"{name} cannot be loaded by datasets{offline}: {first}") from None
    parts = [(split, loaded)] if split is not None else list(loaded.items())
    total = None
    if not streaming:
        total = sum(len(part) for _, part in parts)
    return Source(origin or f"hub:{name}", _loaded_rows(parts), total)


def _hub_unreachable(name: str) -> str | None:
    """Why the Hub cannot be reached (one request, no retries), or None when it answers, whatever it answers."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    try:
        get_session().head(f"{constants.ENDPOINT}/api/datasets/{name}", timeout=HUB_PROBE_SECONDS)
    except Exception as exc:  # the HTTP client's own errors (connect, DNS, timeout): which client is a version's
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


def _loaded_rows(parts) -> Iterator[Row]:
    for split, part in parts:
        yield from batch_rows((_columns_to_rows(b) for b in part.iter(batch_size=_ARROW_BATCH)), split)


def _columns_to_rows(batch: dict[str, list]) -> list[dict[str, Any]]:
    names = list(batch)
    return [dict(zip(names, values)) for values in zip(*batch.values())]
