"""Reading a dataset's rows, one at a time, from wherever it is.

SOURCE (`open_source`) is one of:
- a `.jsonl` file (plain or gzip/bzip2/xz-compressed) or a `.json` file holding JSON Lines or one JSON array
  of rows (read an item at a time, never whole);
- a `.parquet` file (read a row group's batch at a time);
- a `.csv` file (plain or compressed; arena-human-preference-55k ships one), read by `datasets`, streaming,
  as a folder of them is (below): a column of numbers only comes as numbers, an empty cell as null, and
  any other text (`NA`, `null`) as the text it is; a column some format reads as text
  (`formats.TEXT_COLUMNS`: a prompt, a reply, an id) comes as written, digits too (the reply "7"), and any other
  column's list or object cell as the JSON it was written as (`cells`: the same rows as JSON Lines);
- a folder written by `save_to_disk` (a Dataset or a DatasetDict: its Arrow files are read a batch at a time);
- any other folder of data files, or a Hugging Face Hub dataset id: `datasets.load_dataset`, streaming
  (under `HF_HUB_OFFLINE=1` a Hub id is read from the local cache, as `datasets` does offline; an
  unreachable Hub stops the import at once: `preflab.db.ingest.datasets.hub`).

Every row comes as a `Row` (`rows.py`): where it is (split and index, the `raw_records` locator), the payload stored
raw (a JSON Lines line as received; any other row as JSON), its hash, and its data, or why it is not a row
(a line that is not a JSON object).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import Any

import orjson

from preflab.console import plural
from preflab.db.ingest.datasets.cells import csv_row
from preflab.db.ingest.datasets.formats import TEXT_COLUMNS
from preflab.db.ingest.datasets.hub import hub_source
from preflab.db.ingest.datasets.rows import Row, Source, batch_rows
from preflab.db.ingest.lines import Line, open_input, read_lines
from preflab.db.ingest.records import load_record, unstorable
from preflab.db.store import shown_payload
from preflab.errors import InputError, Invalid

FILE_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")


def _text_cell(value: str) -> str | None:
    """A CSV cell of a text column as written (an empty one is null, as in any other column)."""
    return value if value != "" else None


# pandas, under `datasets`' CSV reader, would read the text "NA", "null" or "None" as a missing value, and a
# column of digits as numbers: a text column keeps what was written
_CSV_OPTIONS = {
    "keep_default_na": False,
    "na_values": [""],
    "converters": dict.fromkeys(sorted(TEXT_COLUMNS), _text_cell),
}
_COMPRESSIONS = ("", ".gz", ".bz2", ".xz")
_CHUNK = 2**20
_ARROW_BATCH = 1024
DEFAULT_SPLIT = "train"  # the split `datasets` gives a lone file


def open_source(source: str, split: str | None = None) -> Source:
    """Open SOURCE for reading its rows (every split, or only `split`).

    Raises:
        InputError: the path cannot be read, holds no data files, or has no such split;
            or the Hub dataset cannot be loaded.
    """
    path = Path(source)
    if path.is_file():
        return _file_source(path, split)
    if path.is_dir():
        if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
            return _saved_source(path, split)
        files = [p for p in path.rglob("*") if p.is_file() and _data_file(p)]
        if not files:
            raise InputError(
                f"{path} holds no data files ({', '.join(FILE_SUFFIXES)}) and was not written by save_to_disk"
            )
        if all(_data_file(p, (".csv",)) for p in files):
            return _csv(hub_source(str(path), split, origin=_origin(path), options=_CSV_OPTIONS))
        return hub_source(str(path), split, origin=_origin(path))
    if path.exists() or source.startswith((".", "/", "~")) or source.count("/") > 1 or _data_file(path):
        raise InputError(f"{source} is not a file or folder")
    return hub_source(source, split)


def _csv(source: Source) -> Source:
    """A CSV source whose list and object cells are read as the JSON they were written as (`cells.csv_row`)."""
    return Source(source.origin, (csv_row(row, TEXT_COLUMNS) for row in source.rows), source.total)


def _origin(path: Path) -> str:
    # A file name is bytes: those that are not UTF-8 would reach the database as lone surrogates.
    return shown_payload(os.fsencode(path.resolve()))[-500:]


def _data_file(path: Path, suffixes: tuple[str, ...] = FILE_SUFFIXES) -> bool:
    name = path.name.lower()
    return any(name.endswith(suffix + c) for suffix in suffixes for c in _COMPRESSIONS)


def _one_split(split: str | None, have: str, where: Path | str) -> None:
    if split is not None and split != have:
        raise InputError(f"{where} has no split {split!r} (it has {have})")


# --- rows from lines --------------------------------------------------------------------------


def line_rows(path: Path, split: str) -> Iterator[Row]:
    """The rows of a JSON Lines file, each stored exactly as its line was received; blank lines skipped."""
    index = count()
    with open_input(path) as handle:
        for line in read_lines(handle, path):
            if line.blank:
                continue
            payload = line.payload()
            digest = line.digest or hashlib.sha256(line.data).hexdigest()
            i = next(index)
            try:
                yield Row(split, i, payload, digest, _record(line))
            except Invalid as exc:
                yield Row(split, i, payload, digest, None, str(exc))


def _record(line: Line) -> dict[str, Any]:
    """The line's JSON object: parsed from its bytes at once where it is plain, else by `load_record` for the reason."""
    if not line.cut:
        try:
            data = orjson.loads(line.data)
        except orjson.JSONDecodeError:
            data = None
        # orjson never returns a lone surrogate, and returns a NUL only from this escape: most lines skip the walk.
        if isinstance(data, dict) and b"\\u0000" not in line.data:
            return data
    return load_record(line.text())


def column_values(source: str, split: str | None, column: str) -> Iterator[Any]:
    """One column's value for every row `open_source` gives, in the same order (None where a row has none).

    Cheaper than the rows: a Parquet file's one column is read; a JSON Lines line is parsed by orjson alone,
    not hashed nor made a row (100,000 oasst2 messages: 0.8 s of CPU, against 1.7 s), unless it is
    one `line_rows` takes the long way (cut, not UTF-8, a NUL). Any other source is read row by row.
    """
    path = Path(source)
    if path.is_file() and path.name.lower().endswith(".parquet"):
        import pyarrow.parquet as pq

        reader = pq.ParquetFile(path)
        if column not in reader.schema_arrow.names:
            yield from (None for _ in range(reader.metadata.num_rows))
            return
        for batch in reader.iter_batches(64 * _ARROW_BATCH, columns=[column]):
            yield from batch.column(0).to_pylist()
    elif path.is_file() and _data_file(path, (".jsonl", ".json")) and not _is_json_array(path):
        with open_input(path) as handle:
            for line in read_lines(handle, path):
                raw = line.data
                if line.size == len(raw):  # not cut: the common line parses at once (no Line properties)
                    try:
                        data = orjson.loads(raw)
                    except orjson.JSONDecodeError:
                        data = None
                    if isinstance(data, dict) and b"\\u0000" not in raw:
                        yield data.get(column)
                        continue
                    if not raw.strip():
                        continue  # blank, as line_rows skips it
                try:
                    data = _record(line)
                except Invalid:
                    data = None
                yield data.get(column) if isinstance(data, dict) else None
    else:
        for row in open_source(source, split).rows:
            yield None if row.data is None else row.data.get(column)


# --- files -------------------------------------------------------------------------------


def _file_source(path: Path, split: str | None) -> Source:
    _one_split(split, DEFAULT_SPLIT, path)
    name = path.name.lower()
    origin = _origin(path)
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        try:
            reader = pq.ParquetFile(path)
        except Exception as exc:  # pyarrow raises its own ArrowInvalid/OSError for a file that is not parquet
            raise InputError(f"{path} cannot be read as Parquet ({exc})") from None
        return Source(
            origin,
            batch_rows((b.to_pylist() for b in reader.iter_batches(_ARROW_BATCH)), DEFAULT_SPLIT),
            reader.metadata.num_rows,
        )
    if not _data_file(path):
        raise InputError(f"{path} is not a data file preflab reads ({', '.join(FILE_SUFFIXES)}, plain or compressed)")
    if _data_file(path, (".csv",)):
        return _csv(hub_source("csv", split, origin=origin, options={"data_files": str(path), **_CSV_OPTIONS}))
    if _is_json_array(path):
        return Source(origin, _array_rows(path, DEFAULT_SPLIT))
    return Source(origin, line_rows(path, DEFAULT_SPLIT))


def _first_char(handle) -> str:
    while block := handle.read(4096):
        stripped = block.lstrip()
        if stripped:
            return stripped[0]
    return ""


def _is_json_array(path: Path) -> bool:
    with io.TextIOWrapper(open_input(path), encoding="utf-8-sig", errors="replace") as handle:
        return _first_char(handle) == "["


class _Text:
    """A text handle read a chunk at a time, for taking JSON values off it one by one."""

    def __init__(self, handle):
        self.handle, self.buffer, self.at, self.ended = handle, "", 0, False

    def _more(self, size: int = _CHUNK) -> bool:
        chunk = "" if self.ended else self.handle.read(size)
        self.ended = not chunk
        if chunk:
            self.buffer, self.at = self.buffer[self.at :] + chunk, 0
        return bool(chunk)

    def peek(self) -> str:
        """The next character that is not white space ("" at the end)."""
        while True:
            while self.at < len(self.buffer) and self.buffer[self.at] in " \t\r\n":
                self.at += 1
            if self.at < len(self.buffer) or not self._more():
                return self.buffer[self.at : self.at + 1]

    def take(self) -> str:
        char = self.peek()
        self.at += len(char)
        return char

    def value(self, decoder: json.JSONDecoder) -> tuple[Any, str]:
        """The next JSON value and its text; raises Invalid when what follows is not one."""
        size = _CHUNK
        self.peek()
        while True:
            try:
                value, end = decoder.raw_decode(self.buffer, self.at)
            except json.JSONDecodeError as exc:
                if self._more(size):
                    size *= 2
                    continue
                raise Invalid(exc.msg) from None
            if end == len(self.buffer) and self._more(size):  # a number may go on in the next chunk
                continue
            text, self.at = self.buffer[self.at : end], end
            return value, text


def _array_rows(path: Path, split: str) -> Iterator[Row]:
    """The items of a file holding one JSON array, an item at a time (the item's text is what is stored)."""
    decoder = json.JSONDecoder(strict=False)
    with io.TextIOWrapper(open_input(path), encoding="utf-8-sig", errors="surrogateescape") as handle:
        text = _Text(handle)
        text.take()  # "["
        index = 0
        if text.peek() == "]":
            return
        while True:
            try:
                value, item = text.value(decoder)
            except Invalid as exc:
                raise InputError(f"{path} is not a valid JSON array after {plural(index, 'row')} ({exc})") from None
            yield _text_row(split, index, item, value)
            index += 1
            after = text.take()
            if after == "]":
                return
            if after != ",":
                raise InputError(f"{path} is not a valid JSON array after {plural(index, 'row')} (expected ',' or ']')")


def _text_row(split: str, index: int, text: str, value: Any) -> Row:
    data = text.encode("utf-8", "surrogateescape")
    payload = text if unstorable(text) is None else data  # bytes text cannot hold are stored as bytes
    digest = hashlib.sha256(data).hexdigest()
    if not isinstance(value, dict):
        return Row(split, index, payload, digest, None, f"expected a JSON object, got {type(value).__name__}")
    # json gives a NUL or a lone surrogate only from an escape, or from bytes that were not UTF-8
    reason = unstorable(value) if "\\u" in text or not text.isascii() else None
    return Row(split, index, payload, digest, None if reason else value, reason)


# --- folders written by save_to_disk ----------------------------------------------------------


def _saved_source(path: Path, split: str | None) -> Source:
    if (path / "dataset_dict.json").is_file():
        splits = json.loads((path / "dataset_dict.json").read_text())["splits"]
        if split is not None and split not in splits:
            raise InputError(f"{path} has no split {split!r} (it has {', '.join(splits)})")
        chosen = [(s, path / s) for s in splits if split in (None, s)]
    else:
        state = json.loads((path / "state.json").read_text())
        have = state.get("_split") or DEFAULT_SPLIT
        _one_split(split, have, path)
        chosen = [(have, path)]
    total = sum(_saved_rows(folder) or 0 for _, folder in chosen)
    return Source(_origin(path), _saved_rows_iter(chosen), total or None)


def _saved_rows(folder: Path) -> int | None:
    try:
        info = json.loads((folder / "dataset_info.json").read_text())
        return sum(s["num_examples"] for s in (info.get("splits") or {}).values()) or None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _saved_rows_iter(chosen: list[tuple[str, Path]]) -> Iterator[Row]:
    import pyarrow as pa

    for split, folder in chosen:
        files = [folder / f["filename"] for f in json.loads((folder / "state.json").read_text())["_data_files"]]

        def batches(files=files):
            for file in files:
                with pa.OSFile(str(file)) as raw, pa.ipc.open_stream(raw) as reader:
                    for batch in reader:
                        yield batch.to_pylist()

        yield from batch_rows(batches(), split)
