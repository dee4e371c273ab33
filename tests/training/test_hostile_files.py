"""Best-of-n sample files and retrain configs read by the rules every preflab reader follows.

A BOM, CRLF endings or gzip change nothing; bytes that are not UTF-8, NaN,
NUL, deep nesting or a format preflab cannot read stop the command with one
sentence, never a traceback.
"""

import gzip
import json

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preflab.cli import cli as root
from tests.properties import examples

SAMPLES = [{"group": g, "proxy": p, "true": p / 2} for g in ("a", "b") for p in (1.0, 2.0, 3.0, 4.0)]


def run(*args):
    return CliRunner().invoke(root, [str(a) for a in args])


def one_sentence(result, *fragments):
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def samples_bytes(sep=b"\n") -> bytes:
    return sep.join(json.dumps(s).encode() for s in SAMPLES) + sep


def estimate(path):
    result = run("bon", "estimate", path, "--n", "1,2", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_bon_samples_with_bom_crlf_or_gzip_read_as_plain(tmp_path):
    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(samples_bytes())
    windows = tmp_path / "windows.jsonl"
    windows.write_bytes(b"\xef\xbb\xbf" + samples_bytes(b"\r\n") + b"\r\n")  # and a blank line
    zipped = tmp_path / "samples.jsonl.gz"
    zipped.write_bytes(gzip.compress(samples_bytes()))
    expected = estimate(plain)
    expected.pop("source", None)
    for path in (windows, zipped):
        got = estimate(path)
        got.pop("source", None)
        assert got == expected


@pytest.mark.parametrize(
    "line, fragment",
    [
        (b'{"group": "a", "proxy": 1, "true": "caf\xe9"}', "line 3 is not valid UTF-8 (byte 0xe9 at offset 39)"),
        (b'{"group": "a", "proxy": NaN, "true": 1}', "line 3: holds NaN, which JSON does not allow"),
        (b'{"group": "a", "proxy": 1e999, "true": 1}', "line 3 is not valid JSON (number is infinity"),
        (b"[" * 50_000 + b"]" * 50_000, "line 3 is not valid JSON (nested more than 1,024 levels deep)"),
        (b'{"group": "a\x00", "proxy": 1, "true": 1}', "line 3 is not valid JSON (unexpected control character"),
        (b"[1, 2]", "line 3: expected a JSON object, got list"),
    ],
)
def test_a_bon_sample_line_that_cannot_be_used_is_one_sentence(tmp_path, line, fragment):
    path = tmp_path / "samples.jsonl"
    path.write_bytes(b"\n".join([json.dumps(SAMPLES[0]).encode(), json.dumps(SAMPLES[1]).encode(), line]))
    one_sentence(run("bon", "estimate", path, "--n", "1"), f"samples.jsonl, {fragment}")


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("{}\n".encode("utf-16"), "is UTF-16 text"),
        (b"\x1f\x8b\x08broken", "cannot be read as gzip"),
    ],
)
def test_a_bon_file_preflab_cannot_read_is_one_sentence(tmp_path, content, fragment):
    path = tmp_path / "samples.jsonl"
    path.write_bytes(content)
    one_sentence(run("bon", "estimate", path, "--n", "1"), fragment)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(noise=st.lists(st.binary(max_size=30) | st.sampled_from([b"", b"NaN", b"[" * 2000, b"\x00", b"{}"]), max_size=6))
def test_bon_estimate_on_anything_exits_cleanly(tmp_path, noise):
    path = tmp_path / "samples.jsonl"
    path.write_bytes(b"\n".join([samples_bytes(), *noise]))
    result = run("bon", "estimate", path, "--n", "1")
    assert result.exit_code in (0, 1) and "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    if result.exit_code == 1:
        assert result.output.count("\n") == 1 and result.output.startswith("Error: ")


# --- retrain configs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, content, fragment",
    [
        (
            "retrain.toml",
            b"min_new = 5\n[reward]\nlearning_rate = \xff\n",
            "is not UTF-8 text (byte 0xff at offset 37)",
        ),
        (
            "retrain.toml",
            b"min_new = 5\n[reward]\nlearning_rate = nan\n",
            ": reward.learning_rate is nan, not a finite number",
        ),
        ("retrain.toml", b"min_new = inf\n", ": min_new is inf, not a finite number"),
        ("retrain.toml", b"min_new = 5\x00\n", "is not valid TOML"),
        ("retrain.toml", b"a = " + b"[" * 5000 + b"]" * 5000 + b"\n", "is not valid TOML"),
        ("retrain.json", b'{"min_new": NaN}', ": holds NaN, which JSON does not allow"),
        ("retrain.json", b'{"min_new": 5, "output_dir": "out\\u0000put"}', ": output_dir holds a NUL character"),
        ("retrain.json", b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}", "is not valid JSON (nested more than 1,024"),
        ("retrain.json", b"[1]", "expected a JSON object, got list"),
        ("retrain.toml", "min_new = 5\n".encode("utf-16"), "is UTF-16 text"),
        (
            "retrain.toml",
            b"# " + b"x" * (1 << 20) + b"\nmin_new = 5\n",
            "is over 1,048,576 bytes: not a retrain config",
        ),
    ],
)
def test_retrain_config_bytes_that_cannot_be_a_config_are_one_sentence(tmp_path, name, content, fragment):
    config = tmp_path / name
    config.write_bytes(content)
    one_sentence(
        run("--database-url", f"sqlite:///{tmp_path / 'db.sqlite'}", "retrain", "--config", config),
        f"{config}",
        fragment,
    )


@pytest.mark.parametrize(
    "name, content",
    [
        ("retrain.toml", b"\xef\xbb\xbfmin_new = 3\r\n[reward]\r\nmax_steps = 1\r\n"),
        ("retrain.toml.gz", gzip.compress(b"min_new = 3\n[reward]\nmax_steps = 1\n", mtime=0)),
        ("retrain.json", b'\xef\xbb\xbf{"min_new": 3, "reward": {"max_steps": 1}}\r\n'),
    ],
)
def test_retrain_configs_with_bom_crlf_or_gzip_are_read(tmp_path, name, content):
    config = tmp_path / name
    config.write_bytes(content)
    result = run("--database-url", f"sqlite:///{tmp_path / 'db.sqlite'}", "retrain", "--config", config, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "nothing-to-do"
