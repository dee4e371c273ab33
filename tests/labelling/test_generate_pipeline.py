"""`preflab pipeline` runs the loop: bundled prompts → candidates → AI judge → pairs → export."""

from __future__ import annotations

import json

import pytest

from tests.tiny_models import tiny_causal_lm

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    return tiny_causal_lm(tmp_path_factory.mktemp("models") / "tiny-lm")


def test_pipeline_generates_judges_and_exports(cli, tiny_lm, tmp_path):
    args = (
        "--model",
        tiny_lm,
        "pipeline",
        "--max-prompts",
        2,
        "-n",
        2,
        "--max-new-tokens",
        4,
        "--out",
        tmp_path / "out",
        "--json",
    )
    report = json.loads(cli(*args).stdout)
    assert report["generate"]["stored"] == 4 and report["generate"]["prompts"] == 2
    judge = report["judge"]
    ranked_prompts = report["import"]["new_prompts"]  # the sample rankings' prompts, with their responses
    assert judge["judge"] == "likelihood" and judge["ranked"] == ranked_prompts + 2
    # The judge also ranked the prompts people ranked, so the report can say how far it agrees.
    assert judge["report"]["human_agreement"]["prompts"] > 0
    assert report["pairs"]["rankings"] == report["import"]["imported"] + judge["ranked"]
    # The export keeps people's pairs first: the judge's pairs on prompts people ranked are left out.
    left_out = sum(report["export"]["left_out_by_kind"].values())
    assert left_out > 0 and report["export"]["annotators"] == "human-first"
    assert report["export"]["train"] + report["export"]["test"] + left_out == report["pairs"]["pairs"]

    again = json.loads(cli(*args).stdout)
    assert again["generate"]["stored"] == 0 and again["judge"]["ranked"] == 0
    assert again["judge"]["kept"] == judge["ranked"]
    assert again["pairs"]["pairs"] == report["pairs"]["pairs"]

    skipped = json.loads(
        cli(
            "--model", tiny_lm, "pipeline", "--no-generate", "--judge", "none", "--out", tmp_path / "out2", "--json"
        ).stdout
    )
    assert "generate" not in skipped and "judge" not in skipped
