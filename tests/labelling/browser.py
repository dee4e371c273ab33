"""Driving Label Studio's labelling screen with Playwright, as a person would."""

from collections.abc import Iterator
from contextlib import contextmanager

from playwright.sync_api import expect, sync_playwright

from tests.labelling.ls_fixtures import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS


@contextmanager
def browser_page(height: int = 1100) -> Iterator:
    """A page in Debian's chromium (never a downloaded browser), closed afterwards."""
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": height})
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


# Drawn on a canvas in an element's own font: each character, and two code points no font has
# (U+0378 and U+0379 are unassigned), which chromium draws as the same empty box ("tofu").
_GLYPHS = r"""([selector, chars]) => {
    const font = getComputedStyle(document.querySelector(selector)).font;
    const canvas = document.createElement("canvas");
    canvas.width = canvas.height = 64;
    const ctx = canvas.getContext("2d", {willReadFrequently: true});
    const draw = (c) => {
        ctx.clearRect(0, 0, 64, 64);
        ctx.font = font.replace(/\d+(\.\d+)?px/, "40px");
        ctx.textBaseline = "top";
        ctx.fillStyle = "#000";
        ctx.fillText(c, 4, 4);
        const px = ctx.getImageData(0, 0, 64, 64).data;
        let colour = false;
        for (let i = 0; i < px.length; i += 4) {
            const [r, g, b, a] = [px[i], px[i + 1], px[i + 2], px[i + 3]];
            if (a > 0 && (Math.abs(r - g) > 40 || Math.abs(g - b) > 40)) colour = true;
        }
        return {pixels: Array.from(px).join(","), colour};
    };
    const tofu = draw("\u0378");
    const out = {font, sameTofu: tofu.pixels === draw("\u0379").pixels, glyphs: {}};
    for (const c of chars) {
        const g = draw(c);
        out.glyphs[c] = {tofu: g.pixels === tofu.pixels, colour: g.colour};
    }
    return out;
}"""


def glyphs(page, selector: str, chars: list[str]) -> dict:
    """How chromium draws `chars` in the font of the element at `selector`: as tofu or not, in colour or not.

    A character no installed font has is drawn as the same box as a code point that is
    unassigned; one a font has is drawn as its own glyph. `sameTofu` checks the reference:
    the two unassigned code points must be drawn alike.
    """
    return page.evaluate(_GLYPHS, [selector, chars])
