"""A ranking per criterion against the real Label Studio: the project, its annotations synced, a person dragging."""

import json
import secrets

from playwright.sync_api import expect
from sqlalchemy import select

from preflab.db.models import Candidate, Comparison, Criterion, Ranking
from preflab.labelling.studio.predict import prediction_result
from preflab.templates import ranker_buckets
from preflab.templates.criteria import DESCRIPTIONS
from tests.labelling.browser import browser_page, drag, log_in, open_task
from tests.labelling.ls_fixtures import ARTIFACTS
from tests.labelling.ls_helpers import item, rankings, session, tasks, unique, write_prompts
from tests.labelling.studio.test_ls_criteria import BOTH, result

CRITERIA = ("--criterion", "helpfulness", "--criterion", "harmlessness")


def test_sync_stores_a_ranking_per_criterion_and_a_partial_answer(cli, db_url, ls_env, tmp_path):
    server = ls_env
    prompt = unique("How do I store bleach safely?")
    cli("import", "prompts", write_prompts(tmp_path / "p.jsonl", {prompt: [unique(f"bleach {i}") for i in range(3)]}))
    made = cli("ls", "init", "--template", "ranking_tiers", "--title", unique("criteria"), *CRITERIA, "--json")
    pid = json.loads(made.stdout)["project_id"]  # Label Studio accepted the config
    config = server.sdk().projects.get(pid).label_config
    assert list(ranker_buckets(config)) == ["rank_helpfulness", "rank_harmlessness"]
    with session(db_url) as s:
        stored = dict(s.execute(select(Criterion.name, Criterion.description)).all())
    assert {n: stored.get(n) for n in BOTH} == {n: DESCRIPTIONS[n] for n in BOTH}
    cli("ls", "push", "--project", pid)
    (task,) = tasks(db_url)
    a, b, c = task["shown"]

    sdk = server.sdk()
    alice, bob = (f"{name}-{pid}@preflab.test" for name in ("alice", "bob"))
    both = [
        result("rank_helpfulness", {"helpfulness_tier_1": [item(b)], "helpfulness_tier_2": [item(a), item(c)]}),
        result("rank_harmlessness", {"harmlessness_tier_1": [item(c)], "harmlessness_tier_3": [item(a)]}),
    ]
    # Bob ranks harmlessness only: helpfulness stays as Label Studio saves an untouched ranker.
    partial = [result("rank_helpfulness", {"_": [item(a), item(b), item(c)]}), both[1]]
    alices = sdk.annotations.create(task["id"], completed_by=server.signup(alice), result=both)
    sdk.annotations.create(task["id"], completed_by=server.signup(bob), result=partial)
    # The judge's order fills each criterion's ranker; Label Studio takes the prediction.
    filled = prediction_result("ranking_tiers", [[c], [a, b]], task["shown"], rankers=ranker_buckets(config))
    assert sdk.predictions.create(task=task["id"], result=filled, model_version="judge").id

    summary = json.loads(cli("ls", "sync", "--project", pid, "--json").stdout)
    assert (summary["new"], summary["quarantined"]) == (2, 0)
    stored = {(r["annotator"], r["criterion"]): r["tiers"] for r in rankings(db_url)}
    assert stored == {
        (alice, "helpfulness"): [[b], sorted([a, c])],
        (alice, "harmlessness"): [[c], [a]],
        (bob, "harmlessness"): [[c], [a]],
    }
    again = json.loads(cli("ls", "sync", "--project", pid, "--json").stdout)
    assert (again["new"], again["updated"], again["quarantined"]) == (0, 0, 0)
    assert len(rankings(db_url)) == 3

    cli("pairs", "build")
    with session(db_url) as s:
        pairs = s.execute(
            select(Ranking.criterion, Comparison.criterion, Comparison.chosen_id, Comparison.rejected_id).join(
                Ranking, Ranking.id == Comparison.ranking_id
            )
        ).all()
    assert all(ranked == paired for ranked, paired, _, _ in pairs)  # each pair keeps its ranking's criterion
    assert {(crit, x, y) for _, crit, x, y in pairs} == {
        ("helpfulness", b, a),
        ("helpfulness", b, c),
        ("harmlessness", c, a),
    }

    # Alice's annotation deleted: one annotation gone, its ranking of each criterion marked deleted.
    sdk.annotations.delete(alices.id)
    gone = json.loads(cli("ls", "sync", "--project", pid, "--json").stdout)
    assert (gone["new"], gone["deleted"]) == (0, 1)
    assert {(r["annotator"], r["criterion"]) for r in rankings(db_url) if r["status"] == "valid"} == {
        (bob, "harmlessness")
    }


TALK = [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "My tap water smells of chlorine."},
    {"role": "assistant", "content": "That is common; it is added to disinfect the water."},
    {"role": "user", "content": "Can I mix bleach with vinegar to clean the sink?"},
]


def test_a_person_drags_each_criterions_ranker_and_sync_stores_exactly_that(lcli, sqlite_url, ls_env, tmp_path):
    server = ls_env
    replies = [unique(f"About bleach and vinegar, answer {i}.") for i in range(3)]
    path = tmp_path / "talk.jsonl"
    path.write_text(json.dumps({"prompt": TALK, "responses": replies}) + "\n", encoding="utf-8")
    lcli("import", "prompts", path)
    made = lcli("ls", "init", "--template", "ranking", "--title", unique("criteria browser"), *CRITERIA, "--json")
    pid = json.loads(made.stdout)["project_id"]
    lcli("ls", "push", "--project", pid)
    (task,) = tasks(sqlite_url)
    email, password = f"ranker-{pid}@preflab.test", secrets.token_urlsafe(12)
    server.signup(email, password)

    orders = {}
    with browser_page(height=1600) as page:
        log_in(page, server.url, email, password)
        open_task(page, f"{server.url}/projects/{pid}/data?task={task['id']}", 6)  # three replies, twice
        # The conversation shows above both rankers, its turns with their roles.
        expect(page.locator('.preflab-prompt [data-testid="phrase:2"]')).to_contain_text(TALK[3]["content"])
        expect(page.locator(".preflab-system")).to_contain_text(TALK[0]["content"])
        for name, (source, target) in zip(BOTH, ((2, 0), (1, 0))):
            block = page.locator(f".preflab-criterion-{name}")
            expect(block).to_contain_text(DESCRIPTIONS[name])
            cards = block.locator(".htx-ranker-item")
            shown = cards.evaluate_all("els => els.map(e => e.getAttribute('data-ranker-id'))")
            assert shown == [item(c) for c in task["shown"]]
            drag(page, cards.nth(source), cards.nth(target))
            orders[name] = cards.evaluate_all("els => els.map(e => e.getAttribute('data-ranker-id'))")
            moved = shown[source]
            assert orders[name] == [moved, *(i for i in shown if i != moved)]
        page.wait_for_timeout(1000)
        page.screenshot(path=str(ARTIFACTS / "ls-criteria.png"))
        page.get_by_role("button", name="Submit").click()
        sdk = server.sdk()
        for _ in range(120):
            if list(sdk.annotations.list(task["id"])):
                break
            page.wait_for_timeout(500)

    summary = json.loads(lcli("ls", "sync", "--project", pid, "--json").stdout)
    assert (summary["new"], summary["quarantined"]) == (1, 0)
    stored = {r["criterion"]: r["tiers"] for r in rankings(sqlite_url)}
    assert stored == {name: [[int(i[1:])] for i in order] for name, order in orders.items()}


def test_ls_predict_shows_each_criterions_ranking_in_its_ranker_and_never_one_criterion_for_another(
    lcli, sqlite_url, ls_env, tmp_path
):
    """A judge that ranked by helpfulness and by harmlessness fills each ranker with its own ranking, and the overall
    ranker with neither; a judge with one overall verdict fills every ranker with it (its one order)."""
    responses = [unique(f"bleach answer {n}") for n in range(3)]
    prompt = unique("How do I store bleach safely?")
    judged = {  # judge -> criterion -> its order of the responses (indexes, best first)
        "judge-both": {"helpfulness": [0, 1, 2], "harmlessness": [2, 1, 0]},
        "judge-overall": {"overall": [1, 0, 2]},
    }
    rows = [
        {"prompt": prompt, "responses": responses, "ranking": [[n] for n in order], "annotator": judge}
        | {"annotator_kind": "ai", "criterion": criterion}
        for judge, orders in judged.items()
        for criterion, order in orders.items()
    ]
    path = tmp_path / "judged.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    lcli("import", "rankings", path)
    with session(sqlite_url) as s:
        ids = dict(s.execute(select(Candidate.text, Candidate.id)).all())
    shown_as = {
        judge: {c: [item(ids[responses[n]]) for n in o] for c, o in orders.items()} for judge, orders in judged.items()
    }

    def predicted(*options: str) -> dict[str, dict[str, list[str]]]:
        """judge -> ranker -> the order its prediction shows, on a new project of the plain ranking template."""
        made = lcli("ls", "init", "--template", "ranking", "--title", unique("predict"), *options, "--json")
        pid = json.loads(made.stdout)["project_id"]
        lcli("ls", "push", "--project", pid)
        summary = json.loads(lcli("ls", "predict", "--project", pid, "--json").stdout)
        task = tasks(sqlite_url)[-1]  # the newest project's one task
        got = {
            p.model_version: {r["from_name"]: r["value"]["ranker"][r["from_name"]] for r in p.result}
            for p in ls_env.sdk().predictions.list(task=task["id"])
        }
        assert summary["uploaded"] == len(got)
        return got

    by_criteria = predicted(*CRITERIA)
    both, overall = shown_as["judge-both"], shown_as["judge-overall"]["overall"]
    assert by_criteria == {
        "judge-both": {"rank_helpfulness": both["helpfulness"], "rank_harmlessness": both["harmlessness"]},
        "judge-overall": {"rank_helpfulness": overall, "rank_harmlessness": overall},
    }
    # The overall project: judge-both ranked by no criterion of it, so it predicts nothing there.
    assert predicted() == {"judge-overall": {"rank": overall}}
