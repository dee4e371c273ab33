"""`preflab stats --judges`: which judge to trust, as a table and as JSON."""

from __future__ import annotations

import json

from tests.labelling.judges.test_trust import PROMPTS, judged_store


def test_stats_judges_prints_the_judges_best_first(cli, sessions, tmp_path):
    ids = judged_store(cli, sessions, tmp_path)
    out = json.loads(cli("stats", "--judges", "--json").stdout)
    assert out["bootstrap"] == {"rounds": 1000, "seed": 0, "level": 0.95, "resampled": "prompts"}
    assert [r["annotator_id"] for r in out["judges"]] == [ids[name] for name in ("oracle", "noisy", "always-first",
                                                                                 "always-second")]
    oracle = out["judges"][0]
    assert (oracle["kind"], oracle["model"], oracle["shared_prompts"], oracle["shared_pairs"]) == \
        ("likelihood", "test/oracle", PROMPTS, 3 * PROMPTS)
    assert [oracle["agreement_low"], oracle["agreement_high"]] == [1.0, 1.0]
    assert out == json.loads(cli("stats", "--judges", "--json").stdout)  # seeded: the same intervals every time

    lines = cli("stats", "--judges").stdout.splitlines()
    assert lines[0].startswith("which judge to trust") and "seed 0" in lines[0]
    assert lines[1].split()[:3] == ["judge", "kind", "model"]
    rows = lines[2:6]
    assert [row.split()[1] for row in rows] == ["likelihood", "score", "pairwise", "pairwise"]
    assert "1.00 [1.00, 1.00]" in rows[0] and "n/a (scores each reply alone)" in rows[0]
    noisy = out["judges"][1]
    assert f"0.67 [{noisy['agreement_low']:.2f}, {noisy['agreement_high']:.2f}]" in rows[1]
    assert "n/a (no shared pair)" in rows[2] and "1.00 (first 1.00, second 0.00)" in rows[2]
    assert "1.00 (first 0.00, second 1.00)" in rows[3]
    assert lines[-1].startswith("position bias: ")


def test_stats_judges_with_no_judge(cli, sessions):
    assert json.loads(cli("stats", "--judges", "--json").stdout)["judges"] == []
    assert "no judge has ranked anything yet" in cli("stats", "--judges").stdout
    assert "prompts 0" in cli("stats").stdout  # without --judges: the counts, as before
