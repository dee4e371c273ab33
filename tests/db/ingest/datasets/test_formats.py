"""The registry: every format's one-row example (the README's "Bring your data") imports, and auto picks it,
under the annotator its dataset card documents."""

import pytest

from preflab.db.ingest.datasets.formats import FORMATS
from tests.db.ingest.datasets.shapes_b import run_import, stored

# Who ranked each format's example, as its dataset card says: GPT-4 for UltraFeedback (raw and binarized: trl's
# example has the binarized shape's scores) and Nectar, people for the rest.
JUDGED = {
    "trl": ("ai", "HuggingFaceH4/ultrafeedback_binarized"),
    "hh-rlhf": ("human", "hh-rlhf"),
    "ultrafeedback": ("ai", "openbmb/UltraFeedback:overall_score"),
    "arena": ("human", "arena_user_1"),
    "oasst2": ("human", "OpenAssistant"),
    "helpsteer3": ("human", "nvidia/HelpSteer3"),
    "shp": ("human", "shp"),
    "nectar": ("ai", "nectar-gpt-4"),
    "pku-saferlhf": ("human", "pku-saferlhf-better"),
}


@pytest.mark.parametrize("name", list(FORMATS))
def test_each_example_imports_and_auto_picks_its_format(sessions, tmp_path, name):
    path = tmp_path / f"{name}.jsonl"
    path.write_text(FORMATS[name].example + "\n", encoding="utf-8")
    summary = run_import(sessions, path, "auto")
    assert (summary.format, summary.quarantined) == (name, 0)
    assert summary.rankings >= 1
    assert {r["annotator"] for r in stored(sessions)} == {JUDGED[name]}


def test_each_format_declares_who_ranked():
    assert {name: fmt.kind for name, fmt in FORMATS.items()} == {
        "trl": "human",
        "hh-rlhf": "human",
        "ultrafeedback": "ai",
        "arena": "human",
        "oasst2": "human",
        "helpsteer3": "human",
        "shp": "human",
        "nectar": "ai",
        "pku-saferlhf": "human",
    }
    assert all(fmt.annotator and fmt.judged_by for fmt in FORMATS.values())
    # only trl, which does not say who chose, assumes
    assert {name for name, fmt in FORMATS.items() if fmt.assumed} == {"trl"}
