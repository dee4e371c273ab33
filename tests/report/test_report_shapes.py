"""`preflab report` on stores that hold only part of what it shows: every section is on the page and says what it lacks.

The page's template runs with `StrictUndefined`, so a key a section builder left
out fails here rather than in front of a user (issue 27: a store with a dataset
version and no model version crashed the command).
"""

from __future__ import annotations

import json
import re
from importlib.resources import files
from pathlib import Path

import pytest

from tests.report.store import write_extra_rankings
from tests.tiny_models import tiny_causal_lm

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

SECTIONS = ["data", "agreement", "criteria", "judges", "leaderboard", "models", "optimisation"]
# What each "lacks" sentence starts with, and the section it belongs to.
LACKS = {
    "store": ("data", "No prompts or rankings yet"),
    "prompts": ("data", "No prompts yet"),
    "rankings": ("data", "No rankings yet"),
    "candidates": ("data", "No candidates yet"),
    "comparisons": ("data", "No comparisons yet"),
    "compared": ("agreement", "No prompt is ranked by two annotators yet"),
    "human-human": ("agreement", "No prompt is ranked by two people yet"),
    "human-ai": ("agreement", "No prompt is ranked by both a person and an AI annotator yet"),
    "ai-ai": ("agreement", "No prompt is ranked by two AI annotators yet"),
    "heatmap": ("agreement", "No heatmap yet"),
    "annotators": ("agreement", "No annotator table yet"),
    "hot_spots": ("agreement", "No prompt where annotators disagree yet"),
    "criteria": ("criteria", "Every ranking is by one criterion, overall"),
    "judges": ("judges", "No judge has ranked anything yet"),
    "leaderboard": ("leaderboard", "No models to compare yet"),
    "datasets": ("models", "No dataset versions yet"),
    "runs": ("models", "No training runs yet"),
    "model_versions": ("models", "No model versions yet"),
    "reward_bench": ("models", "No reward model has been through the bench yet"),
    "bon": ("optimisation", "No best-of-n draws yet"),
    "self_reward": ("optimisation", "No self-rewarding iterations yet"),
}
# every store here ranks by one criterion, overall: the Criteria section says so
NOTHING_TRAINED = {"judges", "datasets", "runs", "model_versions", "reward_bench", "bon", "self_reward", "criteria"}


def sample(name: str) -> Path:
    return Path(str(files("preflab.db.samples") / name))


def rankings_by(kind: str, out: Path) -> Path:
    """The bundled sample's rankings by one kind of annotator ("human": three people; "ai": two AI annotators)."""
    lines = [
        line
        for line in sample("rankings.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip() and json.loads(line)["annotator_kind"] == kind
    ]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    return tiny_causal_lm(tmp_path_factory.mktemp("models") / "tiny-lm")


def quarantined_only(cli, tmp_path):
    """A file whose every line is quarantined (the import exits EXIT_ALL_QUARANTINED): records, no rankings."""
    from preflab.errors import EXIT_ALL_QUARANTINED

    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"prompt": "p", "responses": ["a", "b"], "ranking": [[0], [5]], "annotator": "x"}\nnot json\n',
        encoding="utf-8",
    )
    assert cli("import", "rankings", bad, expect_ok=False).exit_code == EXIT_ALL_QUARANTINED


def exported(cli, tmp_path):
    cli("import", "rankings", sample("rankings.jsonl"))
    cli("pairs", "build")
    cli("export", tmp_path / "export", "--format", "jsonl")


def generated(cli, tmp_path, tiny_lm):
    """A dataset version, and candidates from a model never trained here: a model version with no run."""
    exported(cli, tmp_path)
    cli(
        "generate",
        "--model",
        tiny_lm,
        "--prompts",
        sample("prompts.jsonl"),
        "--limit",
        2,
        "-n",
        2,
        "--max-new-tokens",
        4,
    )


# name: (how the store is filled, the sections holding something, the "lacks" sentences its page shows)
SHAPES = {
    "empty": (lambda cli, tmp, lm: None, [], {"store", "compared", "annotators", "leaderboard"} | NOTHING_TRAINED),
    "quarantined records only": (
        lambda cli, tmp, lm: quarantined_only(cli, tmp),
        ["data"],
        {"prompts", "rankings", "candidates", "compared", "annotators", "leaderboard"} | NOTHING_TRAINED,
    ),
    "prompts only": (
        lambda cli, tmp, lm: cli("import", "prompts", sample("prompts.jsonl")),
        ["data"],
        {"rankings", "candidates", "compared", "annotators", "leaderboard"} | NOTHING_TRAINED,
    ),
    "human rankings only": (
        lambda cli, tmp, lm: cli("import", "rankings", rankings_by("human", tmp / "h.jsonl")),
        ["data", "agreement", "leaderboard"],
        {"comparisons", "human-ai", "ai-ai"} | NOTHING_TRAINED,
    ),
    # Imported AI annotators are judges: listed under Judges, with no person to compare them with here.
    "AI rankings only": (
        lambda cli, tmp, lm: cli("import", "rankings", rankings_by("ai", tmp / "ai.jsonl")),
        ["data", "agreement", "judges", "leaderboard"],
        {"comparisons", "human-human", "human-ai", "annotators"} | NOTHING_TRAINED - {"judges"},
    ),
    "no comparisons built": (
        lambda cli, tmp, lm: cli("import", "rankings", sample("rankings.jsonl")),
        ["data", "agreement", "judges", "leaderboard"],
        {"comparisons"} | NOTHING_TRAINED - {"judges"},
    ),
    "no model versions": (
        lambda cli, tmp, lm: exported(cli, tmp),
        ["data", "agreement", "judges", "leaderboard", "models"],
        NOTHING_TRAINED - {"datasets", "judges"},
    ),
    "no training runs": (
        lambda cli, tmp, lm: generated(cli, tmp, lm),
        ["data", "agreement", "judges", "leaderboard", "models"],
        {"runs", "reward_bench", "bon", "self_reward", "criteria"},
    ),
}


def sections_of(html: str) -> dict[str, str]:
    """Each `<section>` of the page by id."""
    return dict(re.findall(r'<section id="(\w+)">(.*?)</section>', html, flags=re.S))


def lacks_shown(html: str) -> set[str]:
    """The LACKS keys whose sentence the page shows, each checked to sit in its own section."""
    shown = set()
    for section, body in sections_of(html).items():
        for paragraph in re.findall(r'<p class="lacks">(.*?)</p>', body, flags=re.S):
            text = " ".join(re.sub(r"<[^>]+>", "", paragraph).split())
            (key,) = [k for k, (where, start) in LACKS.items() if text.startswith(start)] or [text]
            assert LACKS.get(key, (section,))[0] == section, (key, section)
            shown.add(key)
    return shown


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_section_renders_and_says_what_the_store_lacks(shape, cli, sessions, tmp_path, request):
    # `sessions` opens (creates and migrates) the database: the empty store is an empty database, not a missing one.
    fill, holding, lacking = SHAPES[shape]
    fill(cli, tmp_path, request.getfixturevalue("tiny_lm") if shape == "no training runs" else None)

    out = tmp_path / "page" / "report.html"
    printed = cli("report", out).stdout
    assert printed.startswith(f"wrote {out} (7 sections, ")
    html = out.read_text(encoding="utf-8")
    assert list(sections_of(html)) == SECTIONS
    assert lacks_shown(html) == lacking
    if not holding:
        assert "The store holds no prompts" in html and "<figure" not in html

    report = json.loads(cli("report", tmp_path / "again.html", "--json", "--no-text").stdout)
    assert (tmp_path / "again.html").stat().st_size > 0
    assert set(SECTIONS) <= set(report)
    assert report["sections"] == holding  # the sections with something to show; the page shows them all


def test_the_issue_reproduction_pipeline_then_import_then_report(cli, tmp_path, tiny_lm):
    """Issue 27: `pipeline --no-generate`, `import rankings FILE`, `report out.html` raised UndefinedError."""
    cli("--model", tiny_lm, "pipeline", "--no-generate", "--out", tmp_path / "export")
    cli("import", "rankings", write_extra_rankings(tmp_path / "more.jsonl"))
    out = tmp_path / "out.html"
    result = cli("report", out)
    assert result.exit_code == 0 and out.stat().st_size > 0
    html = out.read_text(encoding="utf-8")
    assert lacks_shown(html) == {"runs", "model_versions", "reward_bench", "bon", "self_reward", "criteria"}
    assert "dataset-1-" in sections_of(html)["models"]  # the pipeline's dataset version is listed
    report = json.loads(cli("report", out, "--json").stdout)
    assert report["sections"] == ["data", "agreement", "judges", "leaderboard", "models"]
    assert report["models"]["lineage"] is None and report["models"]["datasets"][0]["name"].startswith("dataset-1-")
