"""The registry: every format's one-row example (the README's "Bring your data") imports, and auto picks it."""

import pytest

from preflab.db.ingest.datasets.formats import FORMATS

from tests.db.ingest.datasets.shapes_b import run_import


@pytest.mark.parametrize("name", list(FORMATS))
def test_each_example_imports_and_auto_picks_its_format(sessions, tmp_path, name):
    path = tmp_path / f"{name}.jsonl"
    path.write_text(FORMATS[name].example + "\n", encoding="utf-8")
    summary = run_import(sessions, path, "auto")
    assert (summary.format, summary.quarantined) == (name, 0)
    assert summary.rankings >= 1
