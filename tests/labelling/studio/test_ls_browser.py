"""A person in a real browser: log in, see the task, drag a response to the top, submit; then sync."""

import json
import secrets
import time

from playwright.sync_api import expect

from tests.labelling.browser import browser_page, drag, ids_on_screen, log_in, open_task
from tests.labelling.ls_fixtures import ARTIFACTS
from tests.labelling.ls_helpers import item, rankings, tasks, unique, write_prompts


def test_annotator_reorders_in_the_browser_and_sync_stores_that_order(lcli, sqlite_url, ls_env, tmp_path):
    server = ls_env
    prompt = unique("Which answer explains photosynthesis best?")
    responses = [unique(f"Photosynthesis answer {i}: plants turn light into sugar.") for i in range(4)]
    lcli("import", "prompts", write_prompts(tmp_path / "p.jsonl", {prompt: responses}))
    pid = json.loads(lcli("ls", "init", "--template", "ranking", "--title", unique("browser"), "--json").stdout)[
        "project_id"
    ]
    lcli("ls", "push", "--project", pid)
    (task,) = tasks(sqlite_url)
    email, password = f"annotator-{pid}@preflab.test", secrets.token_urlsafe(12)
    server.signup(email, password)

    with browser_page() as page:
        log_in(page, server.url, email, password)
        open_task(page, f"{server.url}/projects/{pid}/data?task={task['id']}", 4)
        cards = page.locator(".htx-ranker-item")
        expect(page.locator(".preflab-prompt")).to_contain_text(prompt)
        shown = ids_on_screen(page)
        assert shown == [item(c) for c in task["shown"]]  # the order preflab stored is the order on screen
        for n, text in enumerate(task["texts"]):
            expect(cards.nth(n)).to_contain_text(text)
            expect(cards.nth(n)).to_be_visible()

        drag(page, cards.nth(3), cards.nth(0))  # the bottom response becomes the best
        after = ids_on_screen(page)
        assert after == [shown[3], *shown[:3]]
        page.wait_for_timeout(1500)  # let the drop animation end before the picture
        expect(cards.nth(0)).to_contain_text(task["texts"][3])
        page.screenshot(path=str(ARTIFACTS / "ls-ranking.png"))
        page.get_by_role("button", name="Submit").click()

        sdk, deadline = server.sdk(), time.monotonic() + 60
        while not list(sdk.annotations.list(task["id"])) and time.monotonic() < deadline:
            page.wait_for_timeout(500)

    summary = json.loads(lcli("ls", "sync", "--project", pid, "--json").stdout)
    assert summary["new"] == 1
    (ranking,) = rankings(sqlite_url)
    assert ranking["annotator"] == email and ranking["status"] == "valid"
    assert ranking["tiers"] == [[int(i[1:])] for i in after]  # exactly the order the annotator made
    assert ranking["shown"] == task["shown"] and not ranking["same_as_shown"]
