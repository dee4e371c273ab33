"""The report's annotator table: by pseudonym, with its flags, shown in real chromium."""

import json

import pytest
from sqlalchemy import select

from preflab.db.models import Annotator
from preflab.db.quality.gold import read_gold, store_gold
from tests.db.quality.quality_world import export_file, make_world
from tests.labelling.browser import browser_page
from tests.report.store import run_report

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

PEOPLE = {1: "careful", 2: "careful", 3: "careful", 4: "random", 5: "shown"}


def test_the_agreement_section_shows_each_annotator_and_their_flags(cli, db_url, sessions, tmp_path):
    world = make_world(n_prompts=20, n_candidates=4, n_gold=5, seed=3)
    cli("ls", "import", export_file(world, PEOPLE, tmp_path / "export.json", seed=3))
    gold = tmp_path / "gold.jsonl"
    gold.write_text(world.gold_lines(), encoding="utf-8")
    with sessions.begin() as s:
        store_gold(s, read_gold(gold), origin=gold.name)
        people = {
            int(name.rsplit("-", 1)[1]): (name, p) for name, p in s.execute(select(Annotator.name, Annotator.pseudonym))
        }

    out = tmp_path / "report.html"
    report = json.loads(run_report(db_url, out, "--json"))
    table = report["agreement"]["annotators"]
    expected = json.loads(cli("annotators", "--json").stdout)["annotators"]
    assert table["rows"] == expected  # the page shows what `preflab annotators` says
    flagged = {r["annotator"] for r in table["rows"] if r["flags"]}
    assert flagged == {people[4][1], people[5][1]} and table["flagged"] == 2

    html = out.read_text(encoding="utf-8")
    assert not any(name in html for name, _ in people.values())
    with browser_page() as tab:
        tab.goto(out.resolve().as_uri())
        rows = tab.locator("section#agreement table.annotators tbody tr")
        assert rows.count() == len(PEOPLE)
        shown = {
            rows.nth(i).locator("td").first.inner_text(): rows.nth(i).locator("td.kv span").all_inner_texts()
            for i in range(rows.count())
        }
        assert tab.locator("section#agreement h3#annotators").is_visible()
    assert set(shown) == {p for _, p in people.values()}
    assert "mostly-unchanged" in shown[people[5][1]] and "too-fast" in shown[people[4][1]]
    assert all(shown[people[u][1]] == [] for u in (1, 2, 3))


def test_one_person_without_gold_gives_no_annotator_table(cli, db_url, tmp_path):
    world = make_world(n_prompts=4, n_candidates=3, n_gold=0)
    cli("ls", "import", export_file(world, {1: "careful"}, tmp_path / "export.json"))
    report = json.loads(run_report(db_url, tmp_path / "r.html", "--json"))
    assert report["agreement"]["annotators"] is None and report["agreement"]["categories"] is None
    assert report["sections"] == ["data"]
    assert "No annotator table yet" in (tmp_path / "r.html").read_text(encoding="utf-8")
