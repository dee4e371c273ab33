"""`preflab import dataset`: the summary line, --json, the exit status, and the one-line stops."""

import json
from collections import Counter

from preflab.errors import EXIT_ALL_QUARANTINED
from tests.db.ingest.datasets import test_hh, test_pku, test_trl
from tests.db.ingest.datasets.shapes_b import write_jsonl


def test_summary_line_json_and_reimport(cli, tmp_path):
    path = write_jsonl(tmp_path / "hh.jsonl", test_hh.ROWS)
    out = cli("import", "dataset", "--format", "hh-rlhf", path)
    assert out.stdout == (
        "hh-rlhf: read 8 rows (train 8): 3 new rankings (0 ties, 0 rankings with tied replies), 0 duplicates, "
        "5 quarantined "
        "(3 new prompts, 6 new candidates)\n"
    )
    assert "see them with: preflab quarantine list" in out.stderr
    again = json.loads(cli("import", "dataset", path, "--json").stdout)  # auto: hh-rlhf
    assert again == {
        "format": "hh-rlhf",
        "rows": 8,
        "rankings": 0,
        "ties": 0,
        "rankings_with_ties": 0,
        "identical_replies": 0,
        "identical_ties": 0,
        "duplicates": 3,
        "quarantined": 5,
        "quarantined_replies": 0,
        "prompts": 0,
        "candidates": 0,
        "retried": 0,
        "splits": {"train": 8},
        "reasons": dict(Counter(test_hh.REASONS.values())),
        "assumed": {},
        "criteria": {},
        "quarantined_criteria": 0,
        "assumed_criterion": None,
    }


def test_every_row_quarantined_exits_3(cli, tmp_path):
    path = write_jsonl(tmp_path / "hh.jsonl", test_hh.ROWS[3:5])
    result = cli("import", "dataset", "--format", "hh-rlhf", path, "--limit", "1", expect_ok=False)
    assert result.exit_code == EXIT_ALL_QUARANTINED
    assert result.stdout.startswith(
        "hh-rlhf: read 1 row (train 1): 0 new rankings (0 ties, 0 rankings with tied replies), 0 duplicates, "
        "1 quarantined"
    )


def test_the_wrong_format_stops_with_one_line(cli, tmp_path):
    path = write_jsonl(tmp_path / "hh.jsonl", test_hh.ROWS[:2])
    result = cli("import", "dataset", "--format", "shp", path, expect_ok=False)
    assert result.exit_code == 1
    assert result.output == (
        f"Error: none of the first 2 rows of {path} can be read as shp (they have no "
        "history, human_ref_A, human_ref_B, labels columns); they are hh-rlhf rows: use --format hh-rlhf\n"
    )
    result = cli("import", "dataset", "--criterion", "safety", path, expect_ok=False)
    assert (result.exit_code, result.output) == (
        1,
        "Error: --criterion safety: hh-rlhf gives no such criterion (it gives overall, helpfulness, harmlessness)\n",
    )
    result = cli("import", "dataset", "--criterion", "Safety", path, expect_ok=False)
    assert result.exit_code == 1 and result.output.startswith("Error: --criterion must be a criterion's short name")
    for gone in ("--score-field", "--dimension"):  # --criterion took their place
        assert cli("import", "dataset", gone, "x", path, expect_ok=False).exit_code == 2


def test_what_preflab_assumed_is_said_with_how_to_override_it(cli, tmp_path):
    path = write_jsonl(tmp_path / "prefs.jsonl", test_trl.ROWS[:3])
    out = cli("import", "dataset", path)
    assert out.stdout.startswith("trl: read 3 rows (train 3): 3 new rankings")
    assert (
        "assumed 3 rankings are by people, stored under the human annotator 'trl' (the trl format does not say "
        "who chose); say who ranked with --annotator NAME --annotator-kind human|ai\n"
    ) in out.stderr
    said = json.loads(
        cli("import", "dataset", path, "--json", "--annotator", "gpt-4o", "--annotator-kind", "ai").stdout
    )
    assert (said["rankings"], said["assumed"]) == (3, {})
    named = json.loads(cli("import", "dataset", path, "--json", "--annotator", "team-a").stdout)
    assert named["assumed"] == {
        "team-a": {
            "annotator_kind": "human",
            "rankings": 3,
            "why": "the trl format does not say who chose",
            "override": "--annotator NAME --annotator-kind human|ai",
        }
    }
    bad = cli("import", "dataset", path, "--annotator", " ", expect_ok=False)
    assert (bad.exit_code, bad.output) == (
        1,
        "Error: --annotator must be a name of 1 to 300 characters the database can store\n",
    )
    kind = cli("import", "dataset", path, "--annotator-kind", "robot", expect_ok=False)
    assert kind.exit_code == 2 and "'robot' is not one of 'human', 'ai'" in kind.output


def test_the_summary_counts_new_rankings_by_criterion(cli, tmp_path):
    """A dataset that rates several things: the summary line, then its new rankings by criterion."""
    path = write_jsonl(tmp_path / "pku.jsonl", test_pku.ROWS)
    out = cli("import", "dataset", path)
    assert out.stdout == (
        "pku-saferlhf: read 4 rows (train 4): 5 new rankings (0 ties, 0 rankings with tied replies), 0 duplicates, "
        "1 quarantined (3 new prompts, 6 new candidates)\n"
        "new rankings by criterion: helpfulness 2, harmlessness 3\n"
    )
    assert (
        "1 criterion gave no ranking for its row (too few rated replies, or a rating that cannot be read) and was "
        "quarantined alone, the row's other criteria stored: see them with: preflab quarantine list\n"
    ) in out.stderr
    again = json.loads(cli("import", "dataset", path, "--json", "--criterion", "harmlessness").stdout)
    assert (again["rankings"], again["duplicates"], again["criteria"]) == (0, 3, {})
    folder = tmp_path / "helpful-base"
    folder.mkdir()
    hh = json.loads(cli("import", "dataset", write_jsonl(folder / "train.jsonl", test_hh.ROWS[:2]), "--json").stdout)
    assert (hh["criteria"], hh["assumed_criterion"]["criterion"]) == ({"helpfulness": 2}, "helpfulness")
