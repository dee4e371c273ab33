"""`preflab import` on bytes that are not what it expects: each is imported, quarantined or refused in one sentence.

A bad line keeps its exact bytes (`quarantine show` gives them back) and the good
lines around it import; BOMs, CRLF and compressed files are read as a user
would expect.
"""

import base64
import bz2
import gzip
import json
import lzma
import os

import pytest
from sqlalchemy import select

from preflab.db.models import RawRecord
from tests.db.helpers import ranking_line
from tests.db.procs import TABLES, counts

GOOD = [ranking_line(f"prompt {i}", [f"a{i}", f"b{i}"], [[0], [1]], id=f"r{i}").encode() for i in range(3)]


def write(path, *lines: bytes, sep=b"\n", end=b"\n"):
    path.write_bytes(sep.join(lines) + end)
    return path


def imported(cli, path, what="rankings"):
    out = json.loads(cli("import", what, path, "--json").stdout)
    assert out["read"] == out["imported"] + out["duplicates"] + out["quarantined"] + out["blank"]
    return out


def quarantined(cli):
    return {row["locator"]: row for row in json.loads(cli("quarantine", "list", "--json").stdout)}


def shown(cli, record_id) -> bytes:
    return cli("quarantine", "show", record_id).stdout_bytes


def test_a_line_that_is_not_utf8_is_quarantined_with_its_bytes_and_the_rest_imports(cli, tmp_path):
    bad = b'{"prompt": "caf\xe9", "responses": ["a", "b"]}'  # Latin-1, not UTF-8
    path = write(tmp_path / "r.jsonl", GOOD[0], bad, GOOD[1])
    out = imported(cli, path)
    assert (out["imported"], out["quarantined"]) == (2, 1)
    row = quarantined(cli)["2"]
    assert row["reason"] == "not valid UTF-8 (byte 0xe9 at offset 15)"
    assert shown(cli, row["id"]) == bad + b"\n"  # exactly what was received
    as_json = json.loads(cli("quarantine", "show", row["id"], "--json").stdout)
    assert base64.b64decode(as_json["payload_base64"]) == bad and as_json["reason"] == row["reason"]
    again = imported(cli, path)
    assert (again["imported"], again["duplicates"], again["quarantined"]) == (0, 2, 1)


def test_bom_and_crlf_are_not_part_of_a_record(cli, sessions, tmp_path):
    plain = write(tmp_path / "lf.jsonl", *GOOD)
    windows = write(tmp_path / "crlf.jsonl", b"\xef\xbb\xbf" + GOOD[0], *GOOD[1:], sep=b"\r\n", end=b"\r\n")
    assert imported(cli, windows)["imported"] == 3
    assert imported(cli, plain)["duplicates"] == 3  # the same records, byte for byte
    with sessions.begin() as s:
        assert set(s.scalars(select(RawRecord.payload))) == {g.decode() for g in GOOD}


@pytest.mark.parametrize(
    "line, reason",
    [
        (
            b'{"prompt": "p", "responses": ["a", "b"], "ranking": [[0], [1]], "annotator": "x", "scores": [NaN, 1]}',
            "holds NaN, which JSON does not allow",
        ),
        (
            b'{"prompt": "p", "responses": ["a", "b"], "ranking": [[0], [1]], "annotator": "x", '
            b'"scores": [1, -Infinity]}',
            "holds -Infinity, which JSON does not allow",
        ),
        (
            b'{"prompt": "p", "responses": ["a", "b"], "ranking": [[0], [1]], "annotator": "x", "scores": [1e999, 1]}',
            "not valid JSON (number is infinity when parsed as double)",
        ),
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON (nested more than 1,024 levels deep)"),
        (
            b'{"prompt": "p\\u0000", "responses": ["a", "b"], "ranking": [[0], [1]], "annotator": "x"}',
            "'prompt' holds a NUL character (\\u0000), which the database cannot store",
        ),
        (
            b'{"prompt": "p", "responses": ["a\x00", "b"]}',  # a raw NUL byte: not JSON either, but named the same
            "'responses'[0] holds a NUL character (\\u0000), which the database cannot store",
        ),
        (b'{"prompt": "p"}\x00', "not valid JSON (unexpected content after document)"),
        (
            b'{"prompt": "p", "responses": ["a", "b"], "ranking": [[0], [1]], "annotator": "' + b"x" * 301 + b'"}',
            "'annotator' is 301 characters long, over the limit of 300",
        ),
        (
            b'{"prompt": "p", "responses": ["a", "b"], "ranking": [[0], [1]], "annotator": "x", "annotator_kind": []}',
            "unknown annotator_kind [] (expected 'human' or 'ai')",
        ),
    ],
)
def test_json_the_database_cannot_take_is_quarantined_with_the_reason(cli, tmp_path, line, reason):
    path = write(tmp_path / "r.jsonl", GOOD[0], line, GOOD[1])
    out = imported(cli, path)
    assert (out["imported"], out["quarantined"]) == (2, 1)
    row = quarantined(cli)["2"]
    assert row["reason"].startswith(reason)
    assert shown(cli, row["id"]) == line + b"\n"


def test_lines_of_many_megabytes(cli, db_url, tmp_path, monkeypatch):
    import preflab.db.ingest.lines as lines

    big = ranking_line("big", ["x" * 6_000_000, "y"], [[1], [0]], id="big").encode()  # 6 MB: imported
    monkeypatch.setattr(lines, "MAX_LINE_BYTES", 8 * 2**20)
    huge = b'{"prompt": "' + b"z" * (12 * 2**20) + b'"}'  # past the limit: quarantined, its start kept
    path = write(tmp_path / "r.jsonl", GOOD[0], big, huge, GOOD[1])
    out = imported(cli, path)
    assert (out["imported"], out["quarantined"]) == (3, 1)
    row = quarantined(cli)["3"]
    assert row["reason"] == (
        f"line is {len(huge):,} bytes, over the 8,388,608-byte limit for one record "
        f"(its first 1,048,576 bytes are kept)"
    )
    assert shown(cli, row["id"]) == huge[: 2**20] + b"\n"
    before = counts(db_url, TABLES)
    again = imported(cli, path)
    assert (again["duplicates"], again["quarantined"]) == (3, 1)
    assert counts(db_url, TABLES) == before


@pytest.mark.parametrize("suffix, compress", [(".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress)])
def test_compressed_files_are_read_transparently(cli, tmp_path, suffix, compress):
    path = tmp_path / f"r.jsonl{suffix}"
    path.write_bytes(compress(b"\xef\xbb\xbf" + b"\r\n".join([*GOOD, b"", b"\xff"]) + b"\r\n"))
    out = imported(cli, path)
    assert (out["read"], out["imported"], out["blank"], out["quarantined"]) == (5, 3, 1, 1)
    assert imported(cli, path)["duplicates"] == 3


def test_a_damaged_gzip_keeps_the_batches_before_the_damage(cli, tmp_path):
    lines = [ranking_line(f"p{i}", ["a", "b"], [[0], [1]], id=f"r{i}").encode() for i in range(400)]
    path = tmp_path / "r.jsonl.gz"
    path.write_bytes(gzip.compress(b"\n".join(lines) + b"\n")[:-200])
    result = cli("import", "rankings", path, "--batch-lines", "100", expect_ok=False)
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "Traceback" not in result.output
    assert result.output.startswith(f"Error: {path} is damaged after line ")
    assert "lines before the damage are stored" in result.output
    again = cli("import", "rankings", path, "--batch-lines", "100", expect_ok=False)
    assert again.output == result.output  # nothing was lost or half-written the first time


@pytest.mark.parametrize(
    "data, what",
    [
        ("hello\n".encode("utf-16"), "is UTF-16 text"),
        (b"PK\x03\x04rest", "is a zip archive"),
        (b"\x28\xb5\x2f\xfd", "is zstd-compressed"),
        (gzip.compress("{}\n".encode("utf-16"), mtime=0), "holds UTF-16 text"),
        (b"\x1f\x8bnot really gzip", "cannot be read as gzip"),
    ],
)
def test_formats_preflab_cannot_read_are_refused_in_one_sentence(cli, db_url, tmp_path, data, what):
    path = tmp_path / "r.jsonl"
    path.write_bytes(data)
    result = cli("import", "rankings", path, expect_ok=False)
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "Traceback" not in result.output
    assert result.output.startswith(f"Error: {path} {what}")
    cli("stats")  # the database exists (SQLite: made on first use), and holds nothing
    assert sum(counts(db_url, TABLES).values()) == 0  # stopped before writing anything


def test_prompts_follow_the_same_rules(cli, tmp_path):
    good = [json.dumps({"prompt": f"q{i}"}).encode() for i in range(3)]
    path = tmp_path / "p.jsonl.gz"
    path.write_bytes(gzip.compress(b"\xef\xbb\xbf" + b"\r\n".join([good[0], b"\xc3\x28", b"  ", *good[1:], b"NaN"])))
    out = imported(cli, path, "prompts")
    assert (out["read"], out["imported"], out["quarantined"], out["blank"]) == (6, 3, 2, 1)
    again = imported(cli, path, "prompts")
    assert (again["imported"], again["duplicates"], again["quarantined"]) == (0, 3, 2)


def test_text_summary_names_every_kind_of_line(cli, tmp_path):
    path = write(tmp_path / "r.jsonl", GOOD[0], b"", GOOD[0], b"nope")
    assert cli("import", "rankings", path).stdout == (
        "read 4 lines: imported 1 ranking, 1 quarantined, 1 duplicate, 1 blank (1 new prompt, 2 new candidates)\n"
    )


def test_stats_ends_with_a_newline(cli):
    cli("db", "upgrade")
    assert cli("stats").stdout.endswith("\n")


RECORDS = [json.loads(g) for g in GOOD]
LS_TASKS = [
    {"id": i, "data": {"prompt": f"p{i}", "a": "x", "b": "y"}, "annotations": [{"id": 7, "result": []}]}
    for i in range(3)
]
LS_MIN_TASKS = [
    {
        "id": i,
        "prompt": f"p{i}",
        "items": [{"id": "a", "html": "x"}, {"id": "b", "html": "y"}],
        "rank": {"rank": ["b", "a"]},
        "annotator": 1,
        "annotation_id": 7 + i,
        "lead_time": 3.5,
        "created_at": "2026-11-25T10:00:00Z",
        "updated_at": "2026-11-25T10:00:00Z",
    }
    for i in range(3)
]
DOCUMENTS = {  # name: (bytes, looks like a Label Studio export)
    "an array on one line": (json.dumps(RECORDS).encode() + b"\n", False),
    "a pretty-printed array": (json.dumps(RECORDS, indent=2).encode(), False),
    "a pretty-printed object": (json.dumps(RECORDS[0], indent=2).encode(), False),
    "a pretty-printed array cut short": (json.dumps(RECORDS, indent=2).encode()[:-40], False),
    "a Label Studio export": (json.dumps(LS_TASKS, indent=2).encode(), True),
    "a Label Studio export on one line, after a BOM and blank lines": (
        b"\xef\xbb\xbf\n  \r\n" + json.dumps(LS_TASKS).encode(),
        True,
    ),
    "a Label Studio JSON_MIN export": (json.dumps(LS_MIN_TASKS, indent=2).encode(), True),
}


@pytest.mark.parametrize("what", ["rankings", "prompts"])
@pytest.mark.parametrize("name", DOCUMENTS)
def test_one_json_document_is_refused_before_anything_is_written(cli, db_url, tmp_path, what, name):
    data, label_studio = DOCUMENTS[name]
    path = tmp_path / "export.json.gz"
    path.write_bytes(gzip.compress(data))
    cli("db", "upgrade")
    result = cli("import", what, path, expect_ok=False)
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "Traceback" not in result.output
    assert result.output.startswith(f"Error: {path} is one JSON document, not JSON Lines (one record per line)")
    assert (
        f"it looks like a Label Studio export: import it with `preflab ls import {path}`" in result.output
    ) == label_studio
    assert sum(counts(db_url, TABLES).values()) == 0  # not one raw record


def test_pretty_printed_objects_one_after_another_are_not_json_lines(cli, db_url, tmp_path):
    """`jq . records.jsonl` output: every object spread over several lines."""
    path = write(tmp_path / "pretty.jsonl", *(json.dumps(r, indent=2).encode() for r in RECORDS))
    cli("db", "upgrade")
    result = cli("import", "rankings", path, expect_ok=False)
    assert result.exit_code == 1
    assert result.output == (
        f"Error: {path} holds JSON written across several lines, not JSON Lines (one record "
        f"per line): `jq -c . {path}` writes one record per line\n"
    )
    assert sum(counts(db_url, TABLES).values()) == 0


def test_an_array_alone_is_a_document_and_followed_by_records_is_a_bad_record(cli, tmp_path):
    """Records are objects: an array on line 1 that parses alone, with records after it, is JSON Lines."""
    alone = write(tmp_path / "alone.jsonl", b'["a list"]')
    assert cli("import", "rankings", alone, expect_ok=False).output.startswith(
        f"Error: {alone} is one JSON document, not JSON Lines"
    )
    lines = write(tmp_path / "lines.jsonl", b'["a list"]', *GOOD[:2])
    out = imported(cli, lines)
    assert (out["imported"], out["quarantined"]) == (2, 1)
    assert quarantined(cli)["1"]["reason"] == "expected a JSON object, got list"
    broken = write(tmp_path / "broken.jsonl", b'{"prompt": "cut', GOOD[2])  # not one value either: JSON Lines
    out = imported(cli, broken)
    assert (out["imported"], out["quarantined"]) == (1, 1)


def test_a_file_name_that_is_not_utf8_is_stored_as_text(cli, tmp_path):
    path = write(tmp_path / os.fsdecode(b"caf\xe9 \x01.jsonl"), GOOD[0], b"nope")
    out = imported(cli, path)
    assert (out["imported"], out["quarantined"]) == (1, 1)
    assert quarantined(cli)["2"]["origin"] == str(tmp_path / "caf\\xe9 \x01.jsonl")
    assert imported(cli, path)["duplicates"] == 1


def test_a_document_too_large_to_parse_whole_is_told_by_its_first_line(cli, tmp_path, monkeypatch):
    import preflab.db.ingest.lines as lines

    monkeypatch.setattr(lines, "_DOCUMENT_BYTES", 200)  # smaller than every file below
    export = write(tmp_path / "export.json", json.dumps(LS_TASKS, indent=2).encode())
    result = cli("import", "rankings", export, expect_ok=False)
    assert result.exit_code == 1 and "import it with `preflab ls import" in result.output
    records = write(tmp_path / "records.json", json.dumps(RECORDS, indent=2).encode())
    assert "`jq -c '.[]'" in cli("import", "rankings", records, expect_ok=False).output
    monkeypatch.setattr(lines, "MAX_LINE_BYTES", 250)  # an array on one line, too long to be a record
    monkeypatch.setattr(lines, "KEPT_BYTES", 100)
    one_line = write(tmp_path / "export1.json", json.dumps(LS_TASKS).encode())
    assert "import it with `preflab ls import" in cli("import", "rankings", one_line, expect_ok=False).output
    jsonl = write(tmp_path / "r.jsonl", b'{"prompt": "cut', *GOOD)  # a broken first line, then records
    out = imported(cli, jsonl)
    assert (out["imported"], out["quarantined"]) == (3, 1)
