"""`preflab report`: one offline page, checked in real chromium; pseudonyms only; every section, saying what it lacks.

Stores that hold only part of what the page shows are in test_report_shapes.py.
"""

import json
import re
from pathlib import Path

import pytest
from sqlalchemy import select

from preflab.db.models import Annotator, Candidate, Prompt, Ranking
from tests.labelling.browser import browser_page
from tests.labelling.ls_fixtures import ARTIFACTS
from tests.report.store import (  # noqa: F401 (fixtures)
    EMAIL,
    full_store,
    run_report,
    sample_rankings_path,
    toy_base,
    toy_world,
)

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

# The sections the full store holds something for (it ranks by one criterion: the Criteria section only says so).
SECTIONS = ["data", "agreement", "judges", "leaderboard", "models", "optimisation"]
PAGE = ["data", "agreement", "criteria", "judges", "leaderboard", "models", "optimisation"]
CHARTS = 7  # weekly arrivals, agreement heatmap, judges, leaderboard, lineage, best-of-n, self-rewarding


@pytest.fixture(scope="module")
def page(full_store, tmp_path_factory) -> tuple[Path, dict, str]:
    """The report of the full store: (HTML file, its data as `--json` printed it, that JSON text)."""
    out = tmp_path_factory.mktemp("report") / "report.html"
    printed = run_report(full_store.url, out, "--json")
    return out, json.loads(printed), printed


@pytest.mark.slow
def test_the_page_opens_offline_in_chromium_with_every_section_and_chart(page):
    path, report, _ = page
    assert report["sections"] == SECTIONS
    errors, requests = [], []
    with browser_page() as tab:
        tab.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        tab.on("pageerror", lambda error: errors.append(str(error)))
        tab.on("request", lambda request: requests.append(request.url))
        tab.goto(path.resolve().as_uri())
        tab.wait_for_load_state("load")
        for section in PAGE:
            assert tab.locator(f"section#{section} h2").is_visible(), section
            assert tab.locator(f"nav a[href='#{section}']").count() == 1
        people = tab.locator("section#agreement table.annotators tbody tr")  # the people, by pseudonym
        assert people.count() == len(report["agreement"]["annotators"]["rows"]) >= 3
        assert all(name.startswith("human-") for name in people.locator("td.id").all_inner_texts())
        charts = tab.eval_on_selector_all(
            "figure.chart svg, figure.chart img",
            "els => els.map(e => e.tagName.toLowerCase() === 'img' ? {drawn: e.naturalWidth, width: e.width} :"
            " {drawn: e.querySelectorAll('path, use, text').length, width: e.getBoundingClientRect().width,"
            "  height: e.getBoundingClientRect().height, section: e.closest('section').id})",
        )
        ARTIFACTS.mkdir(exist_ok=True)
        tab.set_viewport_size({"width": 1280, "height": 900})
        tab.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
    assert errors == []
    assert set(requests) <= {path.resolve().as_uri(), "about:blank"}, requests
    assert len(charts) == CHARTS, charts
    assert all(c["drawn"] > 20 and c["width"] > 200 for c in charts), charts
    assert {c["section"] for c in charts} == set(SECTIONS)
    assert (ARTIFACTS / "report.png").stat().st_size > 50_000


@pytest.mark.slow
def test_every_section_reads_what_the_store_holds(page, full_store):
    _, report, _ = page
    data = report["data"]
    assert data["quarantine"]["total"] == 1
    assert "out of range" in data["quarantine"]["by_reason"][0]["name"]
    assert {s["source"] for s in data["rankings_by_source"]} == {"import", "judge", "bon"}
    assert sum(data["weekly"]["rankings"]["import"]) == data["counts"]["rankings"]["total"] - sum(
        sum(v) for k, v in data["weekly"]["rankings"].items() if k != "import"
    )
    agreement = report["agreement"]["categories"]
    assert agreement["human-human"]["ranking_pairs"] > 0 and agreement["human-ai"]["ranking_pairs"] > 0
    assert agreement["ai-ai"]["ranking_pairs"] > 0
    heatmap = report["agreement"]["heatmap"]
    # People by pseudonym; an AI annotator, no person, by its name (never its pseudonym).
    assert set(heatmap["kinds"]) == {"human", "ai"} and all(
        label.startswith("human-") if kind == "human" else not label.startswith("ai-")
        for label, kind in zip(heatmap["labels"], heatmap["kinds"])
    )
    # Several people: the annotator table, one row per person by pseudonym (no judge), as `preflab annotators`.
    with full_store.sessions.begin() as session:
        people = set(
            session.scalars(
                select(Annotator.pseudonym)
                .join(Ranking, Ranking.annotator_id == Annotator.id)
                .where(Annotator.kind == "human", Ranking.status == "valid")
            )
        )
    table = report["agreement"]["annotators"]
    assert {r["annotator"] for r in table["rows"]} == people and len(people) >= 3
    assert sum(r["consensus_rankings"] > 0 for r in table["rows"]) >= 3  # the sample's three people share prompts
    # The loop's reward-model judge, checked against the simulated person who ranked its iteration; the sample's
    # two imported AI annotators beside it, against the sample's people.
    judge = next(j for j in report["judges"] if j["kind"] == "reward-model" and j["human_shared_pairs"])
    assert judge["human_agreement"] > 0.6
    imported = [j for j in report["judges"] if j["imported"]]
    assert len(imported) == 2 and all(j["kind"] == "import" and j["human_shared_pairs"] for j in imported)
    models = report["models"]
    kinds = {n["id"]: n["kind"] for n in models["lineage"]["nodes"]}
    edges = {(kinds[e["from"]], kinds[e["to"]], e["label"], e["iteration"]) for e in models["lineage"]["edges"]}
    assert edges == {("base", "policy", "dpo", 1), ("base", "reward", "reward", None), ("base", "policy", "dpo", None)}
    assert [(r["kind"], r["status"]) for r in models["runs"]] == [
        ("dpo", "succeeded"),
        ("reward", "succeeded"),
        ("dpo", "succeeded"),
    ]
    assert {d["iteration"] for d in models["datasets"]} == {1, None}
    assert {c["kind"] for c in models["current"]} == {"base", "policy", "reward"}
    # Nothing is marked current: the ★ is on the newest of each kind, the model each card shows.
    starred = {n["kind"]: n["name"] for n in models["lineage"]["nodes"] if n["current"]}
    assert starred == {c["kind"]: c["name"] for c in models["current"]}
    (curve,) = report["optimisation"]["bon"]
    assert curve["reward_model"] == full_store.reward_model and curve["n"] == [1, 2, 4]
    assert curve["proxy"] == sorted(curve["proxy"])  # the best of more draws scores no lower
    ((iteration,),) = [loop["iterations"] for loop in report["optimisation"]["self_reward"]]
    assert iteration["step"] == "done" and iteration["win_rate"] is not None
    assert iteration["judge_agreement"] is not None


def _texts(sessions) -> list[str]:
    """The opening of every stored prompt and response long enough to be recognised, one line each."""
    with sessions.begin() as session:
        texts = list(session.scalars(select(Prompt.text))) + list(session.scalars(select(Candidate.text)))
    return [" ".join(t.split())[:24] for t in texts if len(t) >= 20 and re.search("[a-z]", t)]


@pytest.mark.slow
def test_the_page_names_no_person_and_shows_no_text_with_no_text(page, full_store, tmp_path, monkeypatch):
    path, _, printed = page
    html = path.read_text(encoding="utf-8")
    with full_store.sessions.begin() as session:
        people = list(session.scalars(select(Annotator.name).where(Annotator.kind == "human")))
    assert EMAIL in people and "alice" in people
    for text in (html, printed):
        for name in people:
            assert not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), name
    # Excerpts are there by default (the prompts people disagree on most), and cut short.
    openings = _texts(full_store.sessions)
    assert any(opening in html for opening in openings)
    assert all(len(h["prompt"]) <= 80 for h in json.loads(printed)["agreement"]["hot_spots"])

    monkeypatch.setenv("HF_TOKEN", "hf_do_not_print_this_token")
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", "ls-do-not-print-this-key")
    bare = tmp_path / "bare.html"
    printed = run_report(full_store.url, bare, "--no-text", "--json")
    html = bare.read_text(encoding="utf-8")
    for text in (html, printed):
        assert not [opening for opening in openings if opening in text]
        assert "do_not_print" not in text and "do-not-print" not in text and EMAIL not in text
    assert json.loads(printed)["sections"] == SECTIONS and "texts left out" in html


def test_rankings_alone_give_data_and_agreement_as_stats_counts_it(cli, db_url, sessions, sample_rankings, tmp_path):
    from preflab.db.quality.agreement import agreement

    cli("import", "rankings", sample_rankings)
    out = tmp_path / "report.html"
    printed = run_report(db_url, out)
    # The sample's two AI annotators were imported: judges too, against the sample's three people.
    assert printed.startswith(f"wrote {out} (7 sections, 4 with data: Data, Agreement, Judges, Leaderboard)")
    html = out.read_text(encoding="utf-8")
    for lacking in ("models", "optimisation"):  # on the page, and marked in its navigation
        assert f'<section id="{lacking}">' in html and f'<a href="#{lacking}" class="lacking">' in html
    report = json.loads(html.split('<script type="application/json" id="report-data">')[1].split("</script>")[0])
    with sessions.begin() as session:
        expected = agreement(session)
    for name, row in expected.items():
        got = report["agreement"]["categories"][name]
        assert {k: got[k] for k in ("ranking_pairs", "shared_pairs")} == {
            k: row[k] for k in ("ranking_pairs", "shared_pairs")
        }, name
        for key in ("pairwise_agreement", "kendall_tau"):
            assert (got[key] is None) == (row[key] is None) and (row[key] is None or abs(got[key] - row[key]) < 1e-9)
    assert report["agreement"]["categories"]["all"]["prompts"] == expected["all"]["prompts"]
    assert report["data"]["counts"]["rankings"]["valid"] == 107


def test_the_judges_section_says_which_judge_to_trust_first(cli, sessions, tmp_path):
    """The `stats --judges` table on the page: each judge by its name, in the same order, with intervals and
    position bias; people by pseudonym only."""
    from tests.labelling.judges.test_trust import judged_store

    ids = judged_store(cli, sessions, tmp_path)
    out = tmp_path / "report.html"
    report = json.loads(cli("report", out, "--json").stdout)
    stats = json.loads(cli("stats", "--judges", "--json").stdout)["judges"]
    with sessions.begin() as session:
        names = dict(session.execute(select(Annotator.id, Annotator.name).where(Annotator.kind == "ai")).all())
        people = list(session.scalars(select(Annotator.name).where(Annotator.kind == "human")))
    order = [names[ids[name]] for name in ("oracle", "noisy", "always-first", "always-second")]
    judges = report["judges"]
    assert [j["judge"] for j in judges] == order == [r["judge"] for r in stats]
    assert order[0].startswith("judge:likelihood:") and order[0].endswith(":test/oracle")
    for row, same in zip(judges, stats):
        assert (row["human_agreement_low"], row["human_agreement_high"], row["position_bias"]) == (
            same["agreement_low"],
            same["agreement_high"],
            same["position_bias"],
        )
    html = out.read_text(encoding="utf-8")
    section = html.split('<section id="judges">')[1].split("</section>")[0]
    table = section.split('<table class="trust">')[1].split("</table>")[0]
    rows = re.findall(r"<tr><td class=\"id\">([^<]+)</td>(.*?)</tr>", table, flags=re.S)
    assert [judge for judge, _ in rows] == order
    assert "1.00 <small>[1.00, 1.00]</small>" in rows[0][1]
    assert "n/a <small>(scores each reply alone)</small>" in rows[0][1]
    noisy = judges[1]
    low, high = noisy["human_agreement_low"], noisy["human_agreement_high"]
    assert f"0.67 <small>[{low:.2f}, {high:.2f}]</small>" in rows[1][1]
    assert "(no pair both ranked)" in rows[2][1] and "1.00 <small>(first 1.00, second 0.00)</small>" in rows[2][1]
    assert people and not [name for name in people if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", html)]
