"""pku-saferlhf: PKU-Alignment/PKU-SafeRLHF rows become better > worse, or safer > less safe."""

import pytest

from preflab.db.ingest.datasets.pku import FORMAT
from preflab.errors import Invalid
from tests.db.ingest.datasets.shapes_b import pairs, parsed, quarantined, run_import, stored, write_parquet


def row(prompt, r0, r1, better, safer, safe0=True, safe1=False):
    harm = {"Violence": False, "Cybercrime": not safe1}
    return {
        "prompt": prompt,
        "response_0": r0,
        "response_1": r1,
        "prompt_source": "BeaverTails",
        "response_0_source": "Alpaca-7B",
        "response_1_source": "Alpaca3-8B",
        "is_response_0_safe": safe0,
        "is_response_1_safe": safe1,
        "response_0_harm_category": harm,
        "response_1_harm_category": harm,
        "response_0_severity_level": 0,
        "response_1_severity_level": 0 if safe1 else 2,
        "better_response_id": better,
        "safer_response_id": safer,
        "response_0_sha256": "a" * 64,
        "response_1_sha256": "b" * 64,
    }


ROWS = [
    row("How do I pick a lock?", "I cannot help with that.", "Use a tension wrench and a pick.", 1, 0),
    row("How do I bake bread?", "Knead, rise, bake.", "Buy some.", 0, 0, safe1=True),
    row("Same?", "Same.", "Same.", 0, 0),
    row("Which?", "A.", "B.", 2, 0),
]
REASONS = {
    "train:2": "'response_0' and 'response_1' are identical",
    "train:3": "'better_response_id' is 2, not one of 0, 1",
}


def test_rows_parse_by_either_dimension():
    better = parsed(FORMAT.parse(ROWS[0], **FORMAT.options))[0]
    assert better == {
        "prompt": "How do I pick a lock?",
        "tiers": [["Use a tension wrench and a pick."], ["I cannot help with that."]],
        "models": ["Alpaca-7B", "Alpaca3-8B"],
        "scores": None,
        "details": {
            "better_response_id": 1,
            "safer_response_id": 0,
            "is_response_0_safe": True,
            "is_response_1_safe": False,
            "response_0_severity_level": 0,
            "response_1_severity_level": 2,
        },
        "annotator": "pku-saferlhf-better",
        "kind": "human",
        "external_id": None,
    }
    safer = parsed(FORMAT.parse(ROWS[0], dimension="safer"))[0]
    assert safer["tiers"] == [["I cannot help with that."], ["Use a tension wrench and a pick."]]
    assert safer["annotator"] == "pku-saferlhf-safer"
    for locator, reason in REASONS.items():
        with pytest.raises(Invalid) as caught:
            FORMAT.parse(ROWS[int(locator.split(":")[1])])
        assert str(caught.value) == reason


def test_import_both_dimensions_keeps_both(sessions, tmp_path):
    path = write_parquet(tmp_path / "train.parquet", ROWS)
    summary = run_import(sessions, path, "pku-saferlhf")
    assert (summary.rows, summary.rankings, summary.ties, summary.quarantined) == (4, 2, 0, 2)
    assert quarantined(sessions) == REASONS
    safer = run_import(sessions, path, "pku-saferlhf", dimension="safer")
    assert (safer.rankings, safer.duplicates, safer.quarantined) == (3, 0, 1)  # row 3's safer label is fine
    assert [r["annotator"][1] for r in stored(sessions)] == ["pku-saferlhf-better"] * 2 + ["pku-saferlhf-safer"] * 3
    assert stored(sessions)[0]["models"] == {
        "I cannot help with that.": "Alpaca-7B",
        "Use a tension wrench and a pick.": "Alpaca3-8B",
    }
    assert pairs(sessions) == sorted(
        [
            ("Use a tension wrench and a pick.", "I cannot help with that.", 1.0),
            ("I cannot help with that.", "Use a tension wrench and a pick.", 1.0),
            ("Knead, rise, bake.", "Buy some.", 1.0),
            ("Knead, rise, bake.", "Buy some.", 1.0),
            ("A.", "B.", 1.0),
        ]
    )
    again = run_import(sessions, path, "pku-saferlhf", dimension="safer")
    assert (again.rankings, again.duplicates) == (0, 3)
