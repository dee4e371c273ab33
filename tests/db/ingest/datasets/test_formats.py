"""The registry: every format's one-row example (the README's "Bring your data") imports, and auto picks it,
under the annotator its dataset card documents, by the criteria the format gives."""

import pytest

from preflab.db.ingest.datasets.formats import FORMATS
from tests.db.ingest.datasets.shapes_b import run_import, stored

# Who ranked each format's example, as its dataset card says: GPT-4 for UltraFeedback (raw and binarized: trl's
# example has the binarized shape's scores) and Nectar, people for the rest.
JUDGED = {
    "trl": ("ai", "HuggingFaceH4/ultrafeedback_binarized"),
    "hh-rlhf": ("human", "hh-rlhf"),
    "ultrafeedback": ("ai", "openbmb/UltraFeedback"),
    "arena": ("human", "arena_user_1"),
    "oasst2": ("human", "OpenAssistant"),
    "helpsteer3": ("human", "nvidia/HelpSteer3"),
    "shp": ("human", "shp"),
    "nectar": ("ai", "nectar-gpt-4"),
    "pku-saferlhf": ("human", "pku-saferlhf"),
    "helpsteer2": ("human", "nvidia/HelpSteer2"),
}
# What each format's example is ranked by: one ranking per criterion (HelpSteer2's example: a prompt's two rows)
CRITERIA = {
    "ultrafeedback": ["overall", "helpfulness", "honesty", "instruction_following", "truthfulness"],
    "pku-saferlhf": ["helpfulness", "harmlessness"],
    "helpsteer2": ["helpfulness", "correctness", "coherence", "complexity", "verbosity"],
}


@pytest.mark.parametrize("name", list(FORMATS))
def test_each_example_imports_and_auto_picks_its_format(sessions, tmp_path, name):
    path = tmp_path / f"{name}.jsonl"
    path.write_text(FORMATS[name].example + "\n", encoding="utf-8")
    summary = run_import(sessions, path, "auto")
    assert (summary.format, summary.quarantined, summary.quarantined_replies, summary.quarantined_criteria) == (
        name,
        0,
        0,
        0,
    )
    assert summary.rankings >= 1
    assert {r["annotator"] for r in stored(sessions)} == {JUDGED[name]}
    if name in CRITERIA:
        assert list(summary.criteria) == CRITERIA[name] and set(summary.criteria.values()) == {1}
    else:
        assert summary.criteria == {"overall": summary.rankings}


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
        "helpsteer2": "human",
    }
    assert all(fmt.annotator and fmt.judged_by for fmt in FORMATS.values())
    # only trl, which does not say who chose, assumes
    assert {name for name, fmt in FORMATS.items() if fmt.assumed} == {"trl"}


def test_what_each_format_ranks_by():
    """One ranking per row and criterion: `overall` unless the dataset rates several things."""
    offered = {name: fmt.offered for name, fmt in FORMATS.items() if fmt.offered != ("overall",)}
    assert offered == {
        "hh-rlhf": ("overall", "helpfulness", "harmlessness"),
        "ultrafeedback": ("overall", "helpfulness", "honesty", "instruction_following", "truthfulness", "fine_grained"),
        "pku-saferlhf": ("helpfulness", "harmlessness"),
        "helpsteer2": ("helpfulness", "correctness", "coherence", "complexity", "verbosity"),
    }
    # a format of several criteria takes --criterion; hh-rlhf's names its subset, which a file's name may say
    assert {name for name, fmt in FORMATS.items() if "criterion" in fmt.options} == set(offered)
    assert {name for name, fmt in FORMATS.items() if fmt.subsets} == {"hh-rlhf"}
