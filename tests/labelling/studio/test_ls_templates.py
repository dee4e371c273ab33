"""Every template on the real server: project creation, task import, rendering, and its results read back."""

import json
import re

from playwright.sync_api import expect

from tests.labelling.browser import browser_page, ids_on_screen, log_in
from tests.labelling.ls_fixtures import ARTIFACTS
from tests.labelling.ls_helpers import comparisons, expected_pairs, item, rankings, tasks, unique, write_prompts


def setup_project(lcli, tmp_path, template: str, n: int = 3):
    prompt = unique(f"Write a haiku about autumn ({template}).")
    responses = [unique(f"{template} haiku {i}: leaves fall softly down") for i in range(n)]
    lcli("import", "prompts", write_prompts(tmp_path / f"{template}.jsonl", {prompt: responses}))
    pid = json.loads(lcli("ls", "init", "--template", template, "--title", unique(template), "--json").stdout)[
        "project_id"
    ]
    return prompt, pid, json.loads(lcli("ls", "push", "--project", pid, "--json").stdout)


def test_pairwise_template_a_task_per_pair_and_its_results(lcli, sqlite_url, ls_env, tmp_path):
    server = ls_env
    _, pid, pushed = setup_project(lcli, tmp_path, "pairwise", n=3)
    assert pushed["created"] == 3  # every pair of three candidates
    pairs = tasks(sqlite_url)
    remote = {t.id: t.data for t in server.sdk().tasks.list(project=pid)}
    for task in pairs:
        data = remote[task["id"]]
        assert [data["left"], data["right"]] == task["texts"]
        assert [i["id"] for i in data["items"]] == [item(c) for c in task["shown"]]

    user = server.signup(f"hal-{pid}@preflab.test")
    sdk = server.sdk()
    left = {"from_name": "compare", "to_name": "left,right", "type": "pairwise", "value": {"selected": "left"}}
    right = {**left, "value": {"selected": "right"}}
    tie = {"from_name": "tie", "to_name": "prompt", "type": "choices", "value": {"choices": ["Tie"]}}
    for task, result in zip(pairs, ([left], [right], [tie])):
        sdk.annotations.create(task["id"], completed_by=user, result=result)
    summary = json.loads(lcli("ls", "sync", "--project", pid, "--json").stdout)
    assert (summary["new"], summary["quarantined"], summary["same_as_shown"]) == (3, 0, 0)
    got = {r["task"]: r["tiers"] for r in rankings(sqlite_url)}
    (a, b), (c, d), (e, f) = (t["shown"] for t in pairs)
    assert got == {pairs[0]["id"]: [[a], [b]], pairs[1]["id"]: [[d], [c]], pairs[2]["id"]: [sorted([e, f])]}
    lcli("pairs", "build")
    name = f"hal-{pid}@preflab.test"
    assert comparisons(sqlite_url) == expected_pairs(name, [[a], [b]]) | expected_pairs(name, [[d], [c]])


def test_tiers_and_pairwise_templates_render(lcli, sqlite_url, ls_env, tmp_path):
    server = ls_env
    pages = []
    for template in ("ranking_tiers", "pairwise"):
        prompt, pid, _ = setup_project(lcli, tmp_path, template, n=4 if template == "ranking_tiers" else 2)
        task = next(t for t in tasks(sqlite_url) if t["prompt"] == prompt)
        pages.append((template, prompt, pid, task))

    with browser_page() as page:
        email, password = f"viewer-{pages[0][2]}@preflab.test", "viewer-password-1"
        server.signup(email, password)
        log_in(page, server.url, email, password)
        for template, prompt, pid, task in pages:
            page.goto(f"{server.url}/projects/{pid}/data?task={task['id']}")
            expect(page.locator(".preflab-prompt")).to_contain_text(prompt)
            page.wait_for_load_state("networkidle")
            if template == "ranking_tiers":
                cards = page.locator(".htx-ranker-item")
                expect(cards).to_have_count(4)
                assert ids_on_screen(page) == [item(c) for c in task["shown"]]
                for n, text in enumerate(task["texts"]):
                    expect(cards.nth(n)).to_contain_text(text)
                columns = page.locator(".htx-ranker-column")
                expect(columns).to_have_count(5)  # the unranked list and four tiers
                for n, title in enumerate(["Tier 1 (best)", "Tier 2", "Tier 3", "Tier 4 (worst)"], start=1):
                    expect(columns.nth(n)).to_contain_text(title)
            else:
                answers = page.locator(".preflab-answer")
                expect(answers).to_have_count(2)
                for n, text in enumerate(task["texts"]):
                    expect(answers.nth(n)).to_contain_text(text)
                expect(page.get_by_role("checkbox", name=re.compile("^Tie"))).to_be_visible()
            page.screenshot(path=str(ARTIFACTS / f"ls-{template}.png"))
