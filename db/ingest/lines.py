"""Input files read as bytes, a line at a time, whatever they hold.

Every importer reads its file through `read_lines`, so the same rules hold
everywhere: a gzip, bzip2 or xz file is decompressed on the fly; a UTF-8
byte-order mark and the `\\r` of CRLF line endings are not part of a record; a
line that is not UTF-8 text, or holds a NUL, is still a line (its exact bytes are
what gets stored); a line past `MAX_LINE_BYTES` is never held whole in memory.
A file in a format preflab cannot read (UTF-16, zip, zstd), or that is one JSON
document rather than JSON Lines (`refuse_json_document`), is refused with one
sentence before anything is written.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import lzma
import shlex
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from preflab.errors import InputError, Invalid

MAX_LINE_BYTES = 64 * 2**20  # a longer line is quarantined, not parsed
KEPT_BYTES = 2**20  # how much of such a line is stored
_CHUNK = 2**20
BOM = b"\xef\xbb\xbf"

# Leading bytes of the formats a JSON Lines file may come in, and of those it must not.
_COMPRESSED = {b"\x1f\x8b": ("gzip", gzip.open), b"BZh": ("bzip2", bz2.open), b"\xfd7zXZ\x00": ("xz", lzma.open)}
_REFUSED = {
    b"PK\x03\x04": "a zip archive",
    b"\x28\xb5\x2f\xfd": "zstd-compressed",
    b"\xff\xfe": "UTF-16 text",
    b"\xfe\xff": "UTF-16 text",
}
_DAMAGED = (OSError, EOFError, zlib.error, lzma.LZMAError)


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ cost a fifth of reading a line
class Line:
    """One line of an input file, without its line ending.

    `data` holds the line's bytes (the first `KEPT_BYTES` of a line longer than
    `MAX_LINE_BYTES`), `size` how many bytes it had, and `digest` the SHA-256 of
    the whole line when `data` holds only its start.
    """

    number: int
    data: bytes
    size: int
    digest: str | None = None

    @property
    def cut(self) -> bool:
        return self.size > len(self.data)

    @property
    def blank(self) -> bool:
        return not self.cut and not self.data.strip()

    def text(self) -> str:
        """The line as text; raises Invalid when it is too long or not UTF-8."""
        if self.cut:
            raise Invalid(
                f"line is {self.size:,} bytes, over the {MAX_LINE_BYTES:,}-byte limit for one record "
                f"(its first {len(self.data):,} bytes are kept)"
            )
        try:
            return self.data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Invalid(f"not valid UTF-8 (byte 0x{self.data[exc.start]:02x} at offset {exc.start})") from None

    def payload(self) -> str | bytes:
        """What to store as received: the text, or the bytes where text cannot hold them.

        Postgres text cannot hold a NUL, and neither can hold bytes that are not UTF-8.
        """
        if self.cut or b"\x00" in self.data:
            return self.data
        try:
            return self.data.decode("utf-8")
        except UnicodeDecodeError:
            return self.data


def _kind(head: bytes) -> tuple[str, object] | str | None:
    for magic, found in (_COMPRESSED | _REFUSED).items():
        if head.startswith(magic):
            return found
    return None


def open_input(path: str | Path) -> BinaryIO:
    """Open a file for reading as bytes, decompressing gzip, bzip2 and xz on the fly.

    Raises:
        InputError: the path is not a file, or holds a format preflab cannot read.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path} is not a file")
    try:
        with path.open("rb") as raw:
            head = raw.read(8)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    kind = _kind(head)
    if isinstance(kind, str):
        raise InputError(f"{path} is {kind}: preflab reads UTF-8 JSON Lines, plain or gzip/bzip2/xz-compressed")
    if kind is None:
        # A buffer of 1 MB, not 8 kB: a line longer than the buffer is read in pieces and joined, and
        # UltraFeedback's 7 kB lines took 0.25 s to read instead of 0.08 s (bench/README.md, issue 30).
        return path.open("rb", buffering=_CHUNK)
    handle = kind[1](path, "rb")
    try:
        inner = _kind(handle.peek(8)[:8])
    except _DAMAGED as exc:
        handle.close()
        raise InputError(f"{path} cannot be read as {kind[0]} ({exc})") from None
    if isinstance(inner, str):
        handle.close()
        raise InputError(f"{path} holds {inner}: preflab reads UTF-8 JSON Lines")
    return handle


def _long_line(handle: BinaryIO, number: int, start: bytes) -> Line:
    """Read the rest of a line past MAX_LINE_BYTES, hashing it instead of holding it."""
    digest, kept, size = hashlib.sha256(), start[:KEPT_BYTES], 0
    chunk = start
    while chunk:
        ends = chunk.endswith(b"\n")
        part = chunk[:-1] if ends else chunk
        digest.update(part)
        size += len(part)
        if ends:
            break
        chunk = handle.readline(_CHUNK)
    return Line(number, kept, size, digest.hexdigest())


def read_lines(handle: BinaryIO, path: str | Path = "input") -> Iterator[Line]:
    """Yield every line of `handle`, blank ones included, numbered from 1.

    Raises:
        InputError: compressed data is damaged part-way (the lines before it were yielded).
    """
    number = 0
    try:
        while chunk := handle.readline(MAX_LINE_BYTES + 1):
            number += 1
            if number == 1 and chunk.startswith(BOM):
                chunk = chunk[len(BOM) :]
            if len(chunk) > MAX_LINE_BYTES and not chunk.endswith(b"\n"):
                yield _long_line(handle, number, chunk)
                continue
            data = chunk[:-1] if chunk.endswith(b"\n") else chunk
            if data.endswith(b"\r"):
                data = data[:-1]
            yield Line(number, data, len(data))
    except _DAMAGED as exc:
        raise InputError(f"{path} is damaged after line {number:,} ({exc})") from None


def count_lines(path: str | Path) -> int:
    """How many lines `read_lines` will yield for the file (the total of a progress bar)."""
    lines, last = 0, b"\n"
    with open_input(path) as handle:
        try:
            while block := handle.read(_CHUNK):
                lines += block.count(b"\n")
                last = block[-1:]
        except _DAMAGED:
            pass  # read_lines reports it, with the line it reached
    return lines + (last != b"\n")


_UNPARSED = object()
_DOCUMENT_BYTES = MAX_LINE_BYTES  # a file up to this size is parsed whole to tell whether it is one document


def refuse_json_document(path: str | Path) -> None:
    """Stop when the file is one JSON document (an array, a pretty-printed object), not JSON Lines.

    In JSON Lines every record is an object on a line of its own, so the first
    non-blank line parses alone. The file is one JSON document when that line starts
    with `[` or `{` and: it is an array with nothing after it (`[{…}, {…}]` on one
    line); or it does not parse alone but the whole file does; or it is nothing but
    the `[` or `{` a pretty-printer opens with (a file too large to parse whole, or
    a document cut short). An array on line 1 with more lines after it is JSON Lines
    with a bad record, and is quarantined as one.

    Raises:
        InputError: the file is one JSON document; the sentence points to
            `preflab ls import` when it looks like a Label Studio export.
    """
    with open_input(path) as handle:
        lines = (line for line in read_lines(handle, path) if not line.blank)
        try:
            first = next(lines, None)
            head = first.data.strip() if first else b""
            if head[:1] not in (b"[", b"{"):
                return
            value = _UNPARSED if first.cut else _parsed(first.data)
            if value is not _UNPARSED and (isinstance(value, dict) or next(lines, None) is not None):
                return
        except InputError:
            return  # compressed data damaged early: the import reports it, with the line it reached
    if value is _UNPARSED:
        value, start = _whole(path)
        if value is _UNPARSED:
            if head not in (b"[", b"{") and not (first.cut and head.startswith(b"[")):
                return
            if head == b"{":  # `jq .` output: objects pretty-printed one after another, or one cut short
                raise InputError(
                    f"{path} holds JSON written across several lines, not JSON Lines (one record "
                    f"per line): `jq -c . {shlex.quote(str(path))}` writes one record per line"
                )
            value = _first_item(start)
    raise InputError(_document_sentence(path, value))


def _parsed(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return _UNPARSED


def _whole(path: str | Path) -> tuple[Any, bytes]:
    """The file parsed as one JSON value (`_UNPARSED` when it is not one, or too large), and its first bytes."""
    try:
        with open_input(path) as handle:
            data = handle.read(_DOCUMENT_BYTES + 1).removeprefix(BOM)
    except _DAMAGED:
        return _UNPARSED, b""
    return (_parsed(data) if len(data) <= _DOCUMENT_BYTES else _UNPARSED), data


def _first_item(start: bytes) -> list | None:
    """An array too large (or too broken) to parse whole, as its first item alone; None for an object."""
    text = start.decode("utf-8", "replace").lstrip()
    if not text.startswith("["):
        return None
    try:
        return [json.JSONDecoder().raw_decode(text, len(text) - len(text[1:].lstrip()))[0]]
    except (ValueError, RecursionError):
        return []


def _label_studio_task(item: Any) -> bool:
    """A task of a Label Studio JSON export (data and annotations), or of its flat JSON_MIN export."""
    if not isinstance(item, dict):
        return False
    return ("data" in item and ("annotations" in item or "id" in item)) or (
        "annotation_id" in item and ("annotator" in item or "lead_time" in item)
    )


def _document_sentence(path: str | Path, value: Any) -> str:
    items = value if isinstance(value, list) else [value]
    quoted = shlex.quote(str(path))
    sentence = f"{path} is one JSON document, not JSON Lines (one record per line)"
    if items and all(_label_studio_task(t) for t in items):
        return f"{sentence}; it looks like a Label Studio export: import it with `preflab ls import {quoted}`"
    if isinstance(value, list):
        return f"{sentence}: `jq -c '.[]' {quoted}` writes its items one per line"
    if isinstance(value, dict):
        return f"{sentence}: `jq -c . {quoted}` writes it on one line"
    return sentence
