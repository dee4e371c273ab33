"""Issue 31's "done when": a person annotates in a real browser, and `preflab stats` shows the ranking, with
`preflab serve` connected by `preflab ls connect` and no `ls sync` run by anyone."""

from __future__ import annotations

import json
import secrets
import time

import httpx

from tests.labelling.browser import browser_page, drag, ids_on_screen, log_in, open_task
from tests.labelling.ls_fixtures import make_cli
from tests.labelling.ls_helpers import rankings
from tests.server.test_serve_label_studio import connected_project, serve  # noqa: F401  (a fixture)


def test_a_ranking_made_in_the_browser_reaches_stats_through_the_webhook_alone(ls_env, serve, tmp_path):
    url = f"sqlite:///{tmp_path / 'preflab.db'}"
    pid, server, pushed = connected_project(url, "ranking", tmp_path, serve, n_prompts=1)
    (task,) = pushed
    email, password = f"browser-{pid}@preflab.test", secrets.token_urlsafe(12)
    ls_env.signup(email, password)
    deadline = time.monotonic() + 30  # the server's one sync (at its start) is over before anyone annotates
    while _health(server)["sync"]["runs"] < 1 and time.monotonic() < deadline:
        time.sleep(0.2)

    with browser_page() as page:
        log_in(page, ls_env.url, email, password)
        open_task(page, f"{ls_env.url}/projects/{pid}/data?task={task['id']}", len(task["shown"]))
        cards = page.locator(".htx-ranker-item")
        shown = ids_on_screen(page)
        drag(page, cards.nth(len(shown) - 1), cards.nth(0))  # the bottom reply becomes the best
        after = ids_on_screen(page)
        assert after == [shown[-1], *shown[:-1]]
        page.get_by_role("button", name="Submit").click()
        deadline, humans = time.monotonic() + 60, []
        while not humans and time.monotonic() < deadline:  # the browser stays open while its submit is sent
            page.wait_for_timeout(500)
            humans = [r for r in rankings(url) if r["annotator"] == email]

    (ranking,) = humans
    assert ranking["status"] == "valid" and ranking["tiers"] == [[int(i[1:])] for i in after]
    counts = json.loads(make_cli(url)("stats", "--json").stdout)["counts"]
    assert counts["annotators"]["human"] == 1 and counts["rankings"]["valid"] >= 2  # the judge's and the person's
    health = _health(server)
    assert (health["sync"]["runs"], health["sync"]["changed"]) == (1, 0)  # the ranking came by webhook alone
    assert health["deliveries"]["pending"] == 0


def _health(server) -> dict:
    return httpx.get(f"{server.url}/health", timeout=5).json()
