"""Text a database cannot hold, anywhere in a record: quarantined naming the field, its bytes kept.

Postgres text cannot hold a NUL, and a lone UTF-16 surrogate ("\\ud800" written
alone, which Python's json accepts) cannot be encoded as UTF-8 for either
database. Whichever field holds one (the id, the prompt, a response, the
annotator, the model, the source, metadata preflab does not even read), `import
rankings` and `import prompts` quarantine the line with a reason that names the
field; `quarantine show` gives back its exact bytes; importing it again adds
nothing. A valid surrogate pair ("\\ud83d\\ude00", one emoji) is text and imports.
Every case that matters is pinned with `@example`.
"""

import hashlib
import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from preflab.db.models import Annotator, Candidate, Prompt, Ranking, RawRecord
from preflab.errors import EXIT_ALL_QUARANTINED
from tests.db.procs import TABLES, counts
from tests.properties import examples

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

# Where the character goes, and how the reason names that place.
FIELDS = {
    "id": "'id'",
    "prompt": "'prompt'",
    "response": "'responses'[2]",
    "annotator": "'annotator'",
    "model": "'model'",
    "source": "'source'",
    "reference": "'reference'",
    "metadata": "'metadata'['tags'][1]",
}
# How the character is written in the line.
KINDS = {
    "escaped NUL": ("\x00", "holds a NUL character (\\u0000), which the database cannot store"),
    "raw NUL byte": ("\x00", "holds a NUL character (\\u0000), which the database cannot store"),
    "high surrogate": ("\ud800", "holds a lone UTF-16 surrogate (\\ud800), which is not text the database can store"),
    "low surrogate": ("\udfff", "holds a lone UTF-16 surrogate (\\udfff), which is not text the database can store"),
    "surrogate pair": ("\U0001f600", None),  # written "\ud83d\ude00": one character, stored as such
}
SETTINGS = settings(
    max_examples=examples(4),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def line_with(field: str, kind: str, before: str, after: str) -> bytes:
    """A valid ranking (and prompt) record with the kind's character in `field`; its own prompt and id per example."""
    key = f"{field}-{kind}-{before!r}-{after!r}"
    record = {
        "id": f"r-{key}",
        "prompt": f"p-{key}",
        "responses": ["a", "b", "c"],
        "ranking": [[0], [1], [2]],
        "annotator": "alice",
        "model": "m",
        "source": "s",
        "reference": "ref",
        "metadata": {"tags": ["x", "y"]},
    }
    text = before + KINDS[kind][0] + after
    if field == "response":
        record["responses"][2] += text
    elif field == "metadata":
        record["metadata"]["tags"][1] += text
    else:
        record[field] += text
    line = json.dumps(record).encode()  # ensure_ascii: every NUL and surrogate is a \u escape
    return line.replace(b"\\u0000", b"\x00") if kind == "raw NUL byte" else line


def imported(cli, what: str, path) -> dict:
    """Import `path` with --json: its summary, and the exit status as "exit"."""
    result = cli("import", what, path, "--json", expect_ok=False)
    assert "Traceback" not in result.output
    return json.loads(result.stdout) | {"exit": result.exit_code}


def check_quarantined(cli, db_url, sessions, tmp_path, what, line, reason):
    path = tmp_path / f"{what}.jsonl"
    path.write_bytes(line + b"\n")
    first = imported(cli, what, path)
    assert first["exit"] == EXIT_ALL_QUARANTINED, first
    assert (first["read"], first["imported"], first["quarantined"]) == (1, 0, 1)
    assert list(first["reasons"]) == [reason]
    with sessions.begin() as s:
        row = s.scalar(
            select(RawRecord).where(
                RawRecord.payload_hash == hashlib.sha256(line).hexdigest(), RawRecord.source == f"import:{what}"
            )
        )
        assert (row.status, row.reason) == ("quarantined", reason)
    assert cli("quarantine", "show", row.id).stdout_bytes == line + b"\n"  # exactly what was received
    before = counts(db_url, TABLES)
    again = imported(cli, what, path)
    assert (again["exit"], again["imported"], again["quarantined"]) == (EXIT_ALL_QUARANTINED, 0, 1)
    assert counts(db_url, TABLES) == before  # importing again adds nothing


def check_imported(cli, sessions, tmp_path, line):
    path = tmp_path / "rankings.jsonl"
    path.write_bytes(line + b"\n")
    first = imported(cli, "rankings", path)
    assert (first["exit"], first["imported"], first["quarantined"]) == (0, 1, 0), first
    record = json.loads(line)
    with sessions.begin() as s:
        ranking = s.scalar(select(Ranking).where(Ranking.external_id == record["id"]))
        prompt = s.get(Prompt, ranking.prompt_id)
        assert (prompt.text, prompt.source, prompt.reference) == (
            record["prompt"],
            record["source"],
            record["reference"],
        )
        assert s.get(Annotator, ranking.annotator_id).name == record["annotator"]
        candidates = s.execute(select(Candidate.text, Candidate.model).where(Candidate.prompt_id == prompt.id))
        assert set(candidates) == {(r, record["model"]) for r in record["responses"]}
    # The emoji written as UTF-8 rather than escaped: the same ranking, prompt and candidates.
    raw = tmp_path / "raw.jsonl"
    raw.write_bytes(json.dumps(record, ensure_ascii=False).encode() + b"\n")
    same = imported(cli, "rankings", raw)
    assert (same["exit"], same["duplicates"], same["new_prompts"], same["new_candidates"]) == (0, 1, 0, 0)
    assert imported(cli, "prompts", path)["exit"] == 0
    again = imported(cli, "rankings", path)
    assert (again["exit"], again["imported"], again["duplicates"]) == (0, 0, 1)


def _examples(test):
    for field in FIELDS:
        for kind in KINDS:
            test = example(field=field, kind=kind, before="x", after="")(test)
    return test


@_examples
@SETTINGS
@given(
    field=st.sampled_from(sorted(FIELDS)),
    kind=st.sampled_from(sorted(KINDS)),
    before=st.text("ab ", max_size=2),
    after=st.text("ab ", max_size=2),
)
def test_text_no_database_can_hold_is_quarantined_naming_its_field(
    cli, db_url, sessions, tmp_path, field, kind, before, after
):
    line = line_with(field, kind, before, after)
    problem = KINDS[kind][1]
    if problem is None:
        check_imported(cli, sessions, tmp_path, line)
        return
    for what in ("rankings", "prompts"):
        check_quarantined(cli, db_url, sessions, tmp_path, what, line, f"{FIELDS[field]} {problem}")


@pytest.mark.parametrize("kind", [kind for kind, (_, problem) in KINDS.items() if problem])
def test_a_key_is_named_too(cli, db_url, sessions, tmp_path, kind):
    char, problem = KINDS[kind]
    record = {
        "prompt": "p",
        "responses": ["a", "b"],
        "ranking": [[0], [1]],
        "annotator": "alice",
        "metadata": {"ok": 1, f"k{char}": 2},
    }
    line = json.dumps(record).encode()
    if kind == "raw NUL byte":
        line = line.replace(b"\\u0000", b"\x00")
    reason = f"the key 'metadata'[{f'k{char}'!r}] {problem}"  # the key shown as Python writes it: "'k\\x00'"
    for what in ("rankings", "prompts"):
        check_quarantined(cli, db_url, sessions, tmp_path, what, line, reason)
