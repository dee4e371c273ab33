"""pku-saferlhf: PKU-Alignment/PKU-SafeRLHF rows become two rankings, better > worse and safer > less safe."""

import pytest

from preflab.db.conversation import prompt_hash, prompt_messages, reply_hash, reply_messages
from preflab.db.ingest.datasets.pku import FORMAT
from preflab.db.ingest.identity import content_identity, record_identity
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
REASONS = {"train:2": "'response_0' and 'response_1' are identical"}
# row 3's safer verdict is fine, its better one is not: the row gives its harmlessness ranking alone
BAD_VERDICT = "no helpfulness ranking: 'better_response_id' is 2, not one of 0, 1; the row's other criteria are ranked"
DETAILS = {
    "better_response_id": 1,
    "safer_response_id": 0,
    "is_response_0_safe": True,
    "is_response_1_safe": False,
    "response_0_severity_level": 0,
    "response_1_severity_level": 2,
}


def test_a_row_gives_a_ranking_per_verdict():
    helpful, harmless = parsed(FORMAT.parse(ROWS[0], **FORMAT.options))
    assert helpful == {
        "prompt": "How do I pick a lock?",
        "tiers": [["Use a tension wrench and a pick."], ["I cannot help with that."]],
        "models": ["Alpaca-7B", "Alpaca3-8B"],
        "scores": None,
        "details": DETAILS,
        "annotator": "pku-saferlhf",
        "kind": "human",
        "external_id": None,
    }
    assert harmless == helpful | {"tiers": [["I cannot help with that."], ["Use a tension wrench and a pick."]]}
    assert [r.criterion for r in FORMAT.parse(ROWS[0])] == ["helpfulness", "harmlessness"]
    (safer,) = FORMAT.parse(ROWS[0], criterion="harmlessness")
    assert (safer.criterion, parsed([safer])[0]) == ("harmlessness", harmless)
    with pytest.raises(Invalid) as caught:
        FORMAT.parse(ROWS[2])
    assert str(caught.value) == REASONS["train:2"]
    # a verdict that cannot be read loses its own criterion only; asked for alone, the row
    (only,) = FORMAT.parse(ROWS[3])
    assert (only.criterion, only.set_aside) == ("harmlessness", [("helpfulness", ROWS[3], BAD_VERDICT)])
    with pytest.raises(Invalid, match=r"^'better_response_id' is 2, not one of 0, 1$"):
        FORMAT.parse(ROWS[3], criterion="helpfulness")


def test_the_identity_is_the_one_migration_0014_gave_the_old_annotators_rankings():
    """0014 re-keyed `pku-saferlhf-better`/`-safer` rankings to this: a re-import after it adds nothing."""
    for record in FORMAT.parse(ROWS[0]):
        first = record.tiers[0][0]
        replies = [
            (reply_hash(reply_messages(ROWS[0][f"response_{i}"], "r")), ROWS[0][f"response_{i}_source"], t, None)
            for i, t in ((first, 0), (1 - first, 1))
        ]
        prompt = prompt_hash(prompt_messages(ROWS[0]["prompt"]))
        want = content_identity("pku-saferlhf", "human", "pku-saferlhf", prompt, replies, DETAILS, record.criterion)
        assert record_identity("pku-saferlhf", record) == want


def test_import_stores_both_verdicts_and_a_criterion_alone_adds_nothing(sessions, tmp_path):
    path = write_parquet(tmp_path / "train.parquet", ROWS)
    summary = run_import(sessions, path, "pku-saferlhf")
    assert (summary.rows, summary.rankings, summary.ties, summary.quarantined, summary.quarantined_criteria) == (
        4,
        5,
        0,
        1,
        1,
    )
    assert summary.criteria == {"helpfulness": 2, "harmlessness": 3}
    assert quarantined(sessions) == {**REASONS, "train:3/helpfulness": BAD_VERDICT}
    rankings = stored(sessions)
    assert {r["annotator"] for r in rankings} == {("human", "pku-saferlhf")}
    assert rankings[0]["models"] == {
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
    safer = run_import(sessions, path, "pku-saferlhf", criterion="harmlessness")
    assert (safer.rankings, safer.duplicates, safer.quarantined) == (0, 3, 1)
    again = run_import(sessions, path, "pku-saferlhf")
    assert (again.rankings, again.duplicates, again.quarantined, again.quarantined_criteria) == (0, 5, 1, 1)
    assert len(stored(sessions)) == 5 and len(quarantined(sessions)) == 2
