"""A SELECT on a SQLite file, run by a child process that streams its rows back as Arrow.

An export reads millions of id rows. Read in this process, each value becomes a
Python object before Arrow copies it: most of 4.5 s at 100,000 rankings, on the
one core the rest of the export needs too. A child process does that work on
another core, while this one looks up texts and writes Parquet; what crosses the
pipe is Arrow's IPC stream, which this side reads without a Python object per
value (bench/README.md, issue 15).

The child reads through its own connection, which sees what is committed, so
`preflab.db.export.arrow` uses it only while the reading session's transaction has
written nothing: the session's reads then see the latest commit too.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from preflab.errors import DatabaseError


def rows_to_batch(rows: Sequence[Sequence], schema):
    """Rows of Python values (in `schema`'s column order) as one Arrow record batch of `schema`.

    Arrow reads tuples as structs in C: a quarter of the time of transposing the rows into
    columns in Python first (5.5 ms against 21 ms per 20,000 pairs; bench/README.md, issue 15).
    """
    import pyarrow as pa

    if rows and not isinstance(rows[0], tuple):  # SQLAlchemy's rows are sequences, not tuples
        rows = [tuple(row) for row in rows]
    return pa.RecordBatch.from_struct_array(pa.array(rows, type=pa.struct(list(schema))))


def child_batches(path: str, sql: str, params: list, schema, batch_rows: int) -> Iterator:
    """Yield the rows of `sql` on the SQLite file `path` (absolute) as record batches of `schema`, read by a child.

    Raises:
        DatabaseError: the child could not read them (its last error line says why).
    """
    import pyarrow as pa

    request = {
        "path": path,
        "sql": sql,
        "params": params,
        "batch_rows": batch_rows,
        "schema": base64.b64encode(schema.serialize().to_pybytes()).decode(),
    }
    with tempfile.TemporaryFile() as errors:
        child = subprocess.Popen(
            [sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors
        )
        try:
            try:
                child.stdin.write(json.dumps(request).encode() + b"\n")
                child.stdin.close()
            except OSError:
                pass  # the child ended at once: its exit status and message, below, say why
            broken = None
            try:
                yield from pa.ipc.open_stream(child.stdout)
            except (pa.ArrowInvalid, OSError) as exc:  # the stream ended early
                broken = str(exc)
            if child.wait() != 0 or broken:
                errors.seek(0)
                lines = errors.read().decode(errors="replace").strip().splitlines() or [broken or "no message"]
                raise DatabaseError(f"reading {path} in a child process failed: {lines[-1]}")
        finally:
            if child.poll() is None:  # the caller stopped early, or failed
                child.kill()
            child.wait()
            child.stdout.close()


def _serve() -> None:
    """The child's side: one request on stdin, its rows as an Arrow IPC stream on stdout."""
    import pyarrow as pa

    request = json.loads(sys.stdin.buffer.readline())
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(request["schema"])))
    try:
        # The file must exist: the parent has it open (mode=rw does not create one).
        connection = sqlite3.connect(f"{Path(request['path']).as_uri()}?mode=rw", uri=True, timeout=30)
        connection.execute("PRAGMA query_only=ON")
        cursor = connection.execute(request["sql"], request["params"])
        with pa.ipc.new_stream(sys.stdout.buffer, schema) as writer:
            for rows in iter(lambda: cursor.fetchmany(request["batch_rows"]), []):
                writer.write_batch(rows_to_batch(rows, schema))
    except sqlite3.Error as exc:
        sys.stderr.write(f"{exc}\n")  # the parent's message ends with this line
        sys.exit(1)


if __name__ == "__main__":
    _serve()
