"""Reading a Label Studio export file: its tasks one at a time, as Label Studio's JSON has them.

Two export types carry annotations preflab can use. JSON lists tasks, each with
its annotations. JSON_MIN lists one record per annotation: the task's data
flattened at the top level with the task `id`, each control's value under the
control's name, and `annotator`, `annotation_id`, `lead_time`; a task nobody
annotated is a record with `annotation_id` null. A JSON_MIN record is read as
the task with that one annotation, so it is the same annotation as in JSON or
from `ls sync`. CSV and TSV exports lose the JSON the results are in, and are
refused before anything is written.
"""

from __future__ import annotations

import io
import json
import lzma
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from preflab.console import plural
from preflab.db.ingest.lines import open_input
from preflab.errors import InputError
from preflab.labelling.studio.results import bucket_keys

CHUNK = 1 << 20  # characters read at a time
MAX_TASK = 64 << 20  # a task larger than this is taken for a broken file
_DAMAGED = (OSError, EOFError, zlib.error, lzma.LZMAError)  # a compressed file cut short or corrupted

# The fields of a JSON_MIN record that belong to its annotation, not to its task's data.
MIN_ANNOTATION = (
    "annotator",
    "annotation_id",
    "created_at",
    "updated_at",
    "lead_time",
    "agreement",
    "history",
    "was_cancelled",
)
RESULT_KEYS = {"ranker": "ranker", "selected": "pairwise", "choices": "choices"}
TIE_CONTROLS = ("tie",)  # preflab's pairwise template: JSON_MIN writes a single choice as its bare text


@dataclass(frozen=True)
class Unusable:
    """A task that was read whole but cannot be used at all: it is quarantined with this reason."""

    reason: str


class BrokenExport(InputError):
    """The file stops being readable part-way; `sentence(stored)` says where and what was kept."""

    def __init__(self, path: Path, where: str, read: int):
        super().__init__(f"{path} {where}, after {plural(read, 'task')}")
        self.path, self.where, self.read = path, where, read

    def sentence(self, stored: int) -> str:
        kept = (
            "no tasks were stored"
            if not stored
            else "the task before it was stored"
            if stored == 1
            else f"the {stored:,} tasks before it were stored"
        )
        return f"{self.path} {self.where}; {kept}"


def _unusable(text: str, constants: list[str]) -> Unusable | None:
    if constants:
        return Unusable(f"holds {constants[0]}, which JSON does not allow (write null or a number)")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:  # read with surrogateescape: the byte that was not UTF-8
            return Unusable(
                f"not valid UTF-8 (byte 0x{ord(text[exc.start]) - 0xDC00:02x} "
                f"at offset {len(text[: exc.start].encode('utf-8', 'surrogateescape'))} of the task)"
            )
    return None


def _results(name: str, value: Any) -> list[dict] | None:
    """A JSON_MIN field as the results of the control it names; None when it is task data."""
    if name in TIE_CONTROLS and isinstance(value, str):
        return [{"from_name": name, "type": "choices", "value": {"choices": [value]}}]
    if not isinstance(value, list) or not value:
        return None
    kinds = [next((kind for key, kind in RESULT_KEYS.items() if isinstance(v, dict) and key in v), None) for v in value]
    if None in kinds:
        return None
    return [{"from_name": name, "type": kind, "value": v} for kind, v in zip(kinds, value)]


class JsonMinTask(dict):
    """A task read from a JSON_MIN record: its text as written is the record, not this task."""


def is_json_min(record: Any) -> bool:
    return isinstance(record, dict) and "annotations" not in record and "annotation_id" in record


def from_json_min(record: dict) -> JsonMinTask:
    """A JSON_MIN record as the task it flattens, holding its one annotation (none when `annotation_id` is null)."""
    data, result = {}, []
    for name, value in record.items():
        if name == "id" or name in MIN_ANNOTATION:
            continue
        found = _results(name, value)
        if found is None:
            data[name] = value
        else:
            result.extend(found)
    task = JsonMinTask(id=record.get("id"), data=data, annotations=[])
    if record.get("annotation_id") is None:
        return task
    who = record.get("annotator")  # the user's id, or their email (an export that expands users)
    if isinstance(who, str) and who.isdigit():
        who = int(who)
    elif isinstance(who, str):
        who = {"email": who}
    task["annotations"].append(
        {
            "id": record["annotation_id"],
            "completed_by": who,
            "result": result,
            "was_cancelled": False,
            **{k: record[k] for k in ("created_at", "updated_at", "lead_time") if k in record},
        }
    )
    return task


def _refuse(path: Path, head: str) -> InputError:
    """Why a file that is no JSON list cannot be an export: named for the export type it looks like."""
    first = head.splitlines()[0] if head else ""
    if first[:1] not in ("{", "[") and ("\t" in first or "," in first):
        kind = "TSV" if "\t" in first else "CSV"
        return InputError(
            f"{path} is a {kind} export, which loses the JSON that rankings are kept in: "
            f"export the project from Label Studio as JSON or JSON_MIN"
        )
    return InputError(f"{path} is not a Label Studio JSON export (expected a JSON list of tasks)")


class _Position:
    """Where the buffer starts in the file, as a line and column, so an error can say where it is."""

    def __init__(self):
        self.line, self.column = 1, 1

    def drop(self, buffer: str, pos: int) -> None:
        newlines = buffer.count("\n", 0, pos)
        if newlines:
            self.line += newlines
            self.column = pos - buffer.rfind("\n", 0, pos)
        else:
            self.column += pos

    def at(self, buffer: str, pos: int) -> str:
        newlines = buffer.count("\n", 0, pos)
        column = pos - buffer.rfind("\n", 0, pos) if newlines else self.column + pos
        return f"line {self.line + newlines:,}, column {column:,}"


def _json_error(buffer: str, exc: json.JSONDecodeError) -> str:
    char = buffer[exc.pos : exc.pos + 1]
    if char == "\x00":
        return "a raw NUL byte"
    if exc.msg.startswith("Invalid control character") and char:
        return f"a raw control character, 0x{ord(char):02x}"
    return exc.msg[0].lower() + exc.msg[1:]


def iter_tasks(path: str | Path) -> Iterator[tuple[str, Any]]:
    """Each task of a Label Studio JSON or JSON_MIN export as (its JSON text as written, the task), streamed.

    The file (plain or gzip/bzip2/xz-compressed) is read a megabyte at a time and
    each task is decoded on its own by the json module's C decoder, so memory holds
    one chunk and one task, and the text of each task is kept exactly as it was
    written (its raw record). A task that is not UTF-8, or holds NaN or Infinity,
    comes as `Unusable` in place of the parsed task.

    Raises:
        InputError: the file is no JSON list of tasks (nothing was read).
        BrokenExport: it stops being readable after some tasks (they were yielded).
    """
    path = Path(path)
    constants: list[str] = []
    decoder = json.JSONDecoder(parse_constant=lambda name: constants.append(name))
    n = 0
    where = _Position()
    with io.TextIOWrapper(open_input(path), encoding="utf-8-sig", errors="surrogateescape") as handle:

        def read() -> str:
            try:
                return handle.read(CHUNK)
            except _DAMAGED as exc:
                raise BrokenExport(path, f"cannot be read on ({' '.join(str(exc).split())[:100]})", n) from None

        buffer, pos, eof = read(), 0, False

        def skip_space(buffer: str, pos: int) -> tuple[str, int]:
            nonlocal eof
            while True:
                while pos < len(buffer) and buffer[pos] in " \t\r\n":
                    pos += 1
                if pos < len(buffer) or eof:
                    return buffer, pos
                more = read()
                eof = not more
                where.drop(buffer, pos)
                buffer, pos = buffer[pos:] + more, 0

        buffer, pos = skip_space(buffer, pos)
        if buffer[pos : pos + 1] != "[":
            raise _refuse(path, buffer[pos : pos + 4096])
        pos += 1
        while True:
            buffer, pos = skip_space(buffer, pos)
            if buffer[pos : pos + 1] == "]":
                return
            if n and buffer[pos : pos + 1] == ",":
                buffer, pos = skip_space(buffer, pos + 1)
            constants.clear()
            try:
                task, end = decoder.raw_decode(buffer, pos)
            except RecursionError:
                raise BrokenExport(
                    path, f"has task {n + 1:,}, at {where.at(buffer, pos)}, nested too deeply to be read", n
                ) from None
            except json.JSONDecodeError as exc:
                # Most often the task runs past the chunk read so far: read on and try again.
                if eof or len(buffer) - pos > MAX_TASK:
                    raise BrokenExport(
                        path, f"is not valid JSON at {where.at(buffer, exc.pos)} ({_json_error(buffer, exc)})", n
                    ) from None
                more = read()
                eof = not more
                where.drop(buffer, pos)
                buffer, pos = buffer[pos:] + more, 0
                continue
            n += 1
            text = buffer[pos:end]
            unusable = _unusable(text, constants)
            yield text, unusable or (from_json_min(task) if is_json_min(task) else task)
            pos = end
            if pos > CHUNK:  # drop what was read, keep the buffer small
                where.drop(buffer, pos)
                buffer, pos = buffer[pos:], 0


def buckets_used(path: str | Path) -> list[str]:
    """The names of the buckets the annotations of an export rank with, in the order first met.

    Reads as far as the file can be read: the import that follows says where it breaks.
    """
    found: dict[str, None] = {}
    try:
        for _, task in iter_tasks(path):
            annotations = task.get("annotations") if isinstance(task, dict) else None
            for annotation in annotations if isinstance(annotations, list) else []:
                result = annotation.get("result") if isinstance(annotation, dict) else None
                for entry in result if isinstance(result, list) else []:
                    value = entry.get("value") if isinstance(entry, dict) else None
                    names = bucket_keys(value.get("ranker")) if isinstance(value, dict) else None
                    found.update(dict.fromkeys(names or ()))
    except BrokenExport:
        pass
    return list(found)


def shown_names(names: list[str]) -> str:
    """Names for a message: as written, or escaped where they hold what a terminal cannot show."""
    return ", ".join(n if n.isprintable() else repr(n) for n in names)
