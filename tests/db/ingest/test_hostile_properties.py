"""Property-based: `import rankings` and `import prompts` on arbitrary bytes and JSON, with valid records mixed in.

Whatever the file holds, the command exits 0, 1 (a file it refuses whole: a format
it cannot read, one JSON document) or 3 (every record quarantined) with no
traceback; every line read is counted once (imported + duplicates + quarantined +
blank); and importing the same file again changes nothing in the database.
"""

import gzip
import json

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preflab.cli import cli
from preflab.errors import EXIT_ALL_QUARANTINED
from tests.db.procs import TABLES, counts, scalar
from tests.properties import examples

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

EXAMPLES = examples(30)
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

PROMPTS = ["What is 2+2?", "Name a colour.", "Say hi.", "  padded  ", "Ünïcödé ☃", "NFC é", "NFD e\u0301"]
RESPONSES = ["4", "5", "red", "blue", "hi", "hello", "e\u0301", "é", " x ", "x"]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=12)
    | st.text(st.characters() | st.sampled_from(["\x00", "\ud800", "\udfff"]), max_size=6),  # NULs, lone surrogates
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)


@st.composite
def ranking_records(draw) -> dict:
    responses = draw(st.lists(st.sampled_from(RESPONSES), min_size=2, max_size=4, unique=True))
    order = draw(st.permutations(range(len(responses))))
    cuts = sorted(draw(st.sets(st.integers(1, len(order) - 1), max_size=len(order) - 1)))
    tiers = [list(order[a:b]) for a, b in zip([0, *cuts], [*cuts, len(order)])]
    record = {
        "prompt": draw(st.sampled_from(PROMPTS)),
        "responses": responses,
        "ranking": tiers[: draw(st.integers(1, len(tiers)))],
        "annotator": draw(st.sampled_from(["alice", "bob", "judge"])),
        "annotator_kind": draw(st.sampled_from(["human", "ai"])),
    }
    if draw(st.booleans()):
        record["id"] = draw(st.sampled_from(["r1", "r2", 3, "r4"]))
    if draw(st.booleans()):
        record["scores"] = draw(
            st.lists(st.none() | st.floats(-10, 10), min_size=len(responses), max_size=len(responses))
        )
    return record


@st.composite
def prompt_records(draw) -> dict:
    record = {"prompt": draw(st.sampled_from(PROMPTS) | st.text(min_size=1, max_size=10))}
    if draw(st.booleans()):
        record["responses"] = draw(st.lists(st.sampled_from(RESPONSES), max_size=3, unique=True))
    if draw(st.booleans()):
        record["reference"] = draw(st.sampled_from(RESPONSES))
    return record


@st.composite
def mutated(draw, records) -> dict:
    """A valid record with one field replaced by any JSON value, or dropped."""
    record = draw(records)
    key = draw(st.sampled_from([*sorted(record), "model", "source", "id"]))
    if draw(st.booleans()):
        record.pop(key, None)
    else:
        record[key] = draw(json_values)
    return record


def dumped(value, ensure_ascii: bool) -> bytes:
    return json.dumps(value, ensure_ascii=ensure_ascii).encode("utf-8", "surrogatepass")


SPECIAL = [
    b"",
    b"   ",
    b"\t",
    b"NaN",
    b'{"prompt": Infinity}',
    b"[" * 3000 + b"]" * 3000,
    b"\x00",
    b'{"prompt": "a\x00b"}',
    b"\xef\xbb\xbf{}",
    b"\xff\xfe\xfd",
    b"\xed\xa0\x80",
    b"{",
    b"null",
    b"[]",
    b"[",
    b'["a list"]',
    b'{"prompt": "\\ud800"}',
]


def lines_of(records):
    broken = st.builds(dumped, mutated(records), st.booleans())
    return st.one_of(  # a record with one wrong field is where a parser's checks are tried hardest
        st.builds(dumped, records, st.booleans()),
        broken,
        broken,
        broken,
        st.builds(dumped, json_values, st.booleans()),
        st.binary(max_size=40),
        st.sampled_from(SPECIAL),
    )


def files_of(records):
    return st.builds(
        lambda lines, sep, trailing, bom: (
            (b"\xef\xbb\xbf" if bom else b"") + sep.join(lines) + (sep if trailing else b"")
        ),
        st.lists(lines_of(records), max_size=10),
        st.sampled_from([b"\n", b"\r\n"]),
        st.booleans(),
        st.booleans(),
    )


def line_count(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def state(url: str) -> dict:
    return counts(url, TABLES) | {
        "quarantined": scalar(url, "SELECT count(*) FROM raw_records WHERE status = 'quarantined'")
    }


def check_import(url, path, what, data):
    runner = CliRunner()

    def run():
        result = runner.invoke(cli, ["--database-url", url, "import", what, str(path), "--json"])
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
        assert result.exit_code in (0, 1, EXIT_ALL_QUARANTINED) and "Traceback" not in result.output
        if result.exit_code == 1:  # refused (a format preflab cannot read, one JSON document): one sentence
            assert result.stdout == "" and result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1
            return None
        summary = json.loads(result.stdout)
        assert (result.exit_code == EXIT_ALL_QUARANTINED) == (
            summary["quarantined"] > 0 and summary["imported"] == summary["duplicates"] == 0
        )
        assert summary["read"] == line_count(data)
        assert summary["read"] == (
            summary["imported"] + summary["duplicates"] + summary["quarantined"] + summary["blank"]
        )
        return summary

    first = run()
    before = state(url)
    second = run()
    assert state(url) == before  # importing again changes nothing
    assert (first is None) == (second is None)
    if first is not None:
        assert second["imported"] == 0 and second["retried"] == 0
        assert second["duplicates"] == first["imported"] + first["duplicates"]
        assert (second["quarantined"], second["blank"]) == (first["quarantined"], first["blank"])


def _property(records, what):
    @SETTINGS
    @given(data=files_of(records), compressed=st.booleans())
    def test(db_url, tmp_path, data, compressed):
        path = tmp_path / ("in.jsonl.gz" if compressed else "in.jsonl")
        path.write_bytes(gzip.compress(data) if compressed else data)
        check_import(db_url, path, what, data)

    return test


test_import_rankings_on_anything = _property(ranking_records(), "rankings")
test_import_prompts_on_anything = _property(prompt_records(), "prompts")


@pytest.mark.parametrize("what", ["rankings", "prompts"])
@SETTINGS
@given(data=st.binary(max_size=300))
def test_import_of_pure_noise(db_url, tmp_path, what, data):
    path = tmp_path / "noise.jsonl"
    path.write_bytes(data)
    check_import(db_url, path, what, data)
