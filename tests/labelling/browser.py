"""Driving Label Studio's labelling screen with Playwright, as a person would."""

from collections.abc import Iterator
from contextlib import contextmanager

from playwright.sync_api import expect, sync_playwright

from tests.labelling.ls_fixtures import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS


@contextmanager
def browser_page() -> Iterator:
    """A page in Debian's chromium (never a downloaded browser), closed afterwards."""
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.set_default_timeout(120_000)
            yield page
        finally:
            browser.close()


def drag(page, source, target) -> None:
    """Press on `source`, move in small steps to the top of `target`, release (as a hand would)."""
    start, end = source.bounding_box(), target.bounding_box()
    x, y = start["x"] + start["width"] / 2, start["y"] + 20
    to_y = end["y"] + 5
    page.mouse.move(x, y)
    page.mouse.down()
    for step in range(1, 21):
        page.mouse.move(x, y + (to_y - y) * step / 20)
        page.wait_for_timeout(30)
    page.wait_for_timeout(300)
    page.mouse.up()
    page.wait_for_timeout(500)


def ids_on_screen(page) -> list[str]:
    """The item ids of the ranker's cards, top to bottom, read in one go (the app re-renders)."""
    return page.locator(".htx-ranker-item").evaluate_all("els => els.map(e => e.getAttribute('data-ranker-id'))")


def open_task(page, url: str, n_cards: int):
    """Open a task in the labelling screen and wait until the app has settled."""
    page.goto(url)
    expect(page.locator(".htx-ranker-item")).to_have_count(n_cards)
    page.wait_for_load_state("networkidle")
    expect(page.locator(".htx-ranker-item")).to_have_count(n_cards)


def log_in(page, base_url: str, email: str, password: str) -> None:
    page.goto(f"{base_url}/user/login/")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert "/user/login" not in page.url, f"could not log in as {email}"
