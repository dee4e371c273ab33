"""A worker's error line names its shard: of an array's N logs, the one that failed says which slice it was.

The Slurm array itself is tested in tests/slurm/test_array.py (a task against a dead server); here the same line in
process, for each command that takes `--shard`, and the line of a run without one, unchanged.
"""

from __future__ import annotations

import json

import pytest

from tests.labelling.ls_fixtures import reserved_port

pytestmark = pytest.mark.slow  # measured at a second or more a test (the judge's imports): `make check` leaves it out


@pytest.fixture
def dead_url():
    """A loopback URL whose port is bound and not listening: every connection is refused."""
    sock = reserved_port()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    sock.close()


@pytest.mark.one_database  # the line is the command layer's; the store only holds the prompt
@pytest.mark.parametrize("command", [["generate"], ["judge", "pairwise"]])
def test_an_error_line_names_the_shard_the_run_works_on(cli, dead_url, tmp_path, command):
    path = tmp_path / "prompts.jsonl"
    path.write_text(json.dumps({"prompt": "Which is best?", "responses": ["A.", "B."]}) + "\n", encoding="utf-8")
    cli("import", "prompts", path)
    on_dead = [*command, "--engine", "openai", "--api-base", dead_url, "--model", "m", "--max-retries", "0"]
    said = f"the server at {dead_url} does not answer (Connection error. (ConnectError)): is it running there?"

    sharded = cli(*on_dead, "--shard", "0/1", expect_ok=False)
    assert sharded.exit_code == 1 and sharded.output.splitlines()[-1] == f"Error: shard 0/1: {said}"
    whole = cli(*on_dead, expect_ok=False)
    assert whole.exit_code == 1 and whole.output.splitlines()[-1] == f"Error: {said}"
