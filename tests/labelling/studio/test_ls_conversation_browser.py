"""A conversation in every template, in a real browser: the turns, the system prompt, long, Arabic and Chinese text."""

import json
import random
import shutil
import time

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from preflab.db.conversation import reply_hash
from preflab.db.models import Candidate
from preflab.templates import TEMPLATES
from tests.labelling.browser import browser_page, drag, glyphs, ids_on_screen, log_in
from tests.labelling.ls_fixtures import ARTIFACTS
from tests.labelling.ls_helpers import item, rankings, session, tasks, unique

SYSTEM = "You are a patient tutor. Answer in the language of the question."
TURNS = [
    {"role": "user", "content": "ما هي عاصمة مصر؟ أجب بجملة واحدة."},
    {"role": "assistant", "content": "عاصمة مصر هي القاهرة."},
    {"role": "user", "content": "用中文解释一下为什么天空是蓝色的。🌤️"},
    {"role": "assistant", "content": "天空是蓝色的，因为大气中的分子散射了更多的蓝光。"},
    {"role": "user", "content": "Now summarise both answers in English, at length. 🙂"},
]
PROMPT = [{"role": "system", "content": SYSTEM}, *TURNS]
_words, _rng = (
    [
        "light",
        "air",
        "blue",
        "short",
        "waves",
        "scatter",
        "more",
        "than",
        "red",
        "ones",
        "so",
        "the",
        "sky",
        "looks",
        "blue",
    ],
    random.Random(30),
)
LONG = " ".join(_rng.choice(_words) for _ in range(3000))  # a 3,000-word reply
ARABIC = "القاهرة هي عاصمة مصر، والسماء زرقاء لأن الضوء الأزرق يتشتت أكثر."
MULTI = [
    {"role": "assistant", "content": "Short version: Cairo, and Rayleigh scattering. 🙂"},
    {"role": "user", "content": "更详细一点？"},
    {"role": "assistant", "content": "瑞利散射：波长短的蓝光比红光散射得更多。"},
]
HEIGHT = 1800  # the browser's viewport: the conversation and all four capped cards fit
SHORT = "Cairo; and the sky is blue because blue light scatters most. 🌍"
TEXT_CAP = 320  # px: the templates' max-height of a response's text, which scrolls inside its card
CARD_CAP = TEXT_CAP + 120  # the card around it: title and padding


def rect(locator) -> dict:
    return locator.evaluate(
        "e => { const r = e.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, "
        "height: r.height, scroll: e.scrollHeight, client: e.clientHeight}; }"
    )


def right_to_left(box, text: str | None = None) -> bool:
    """Whether the text in `box` (in the element `text` inside it, if given) starts at the box's right edge.

    The first letter of a right-to-left paragraph is drawn at the right of its first line,
    however the paragraph wraps; a left-to-right one's at the left.
    """
    return box.evaluate(
        """(e, text) => {
        const walker = document.createTreeWalker(text ? e.querySelector(text) : e, NodeFilter.SHOW_TEXT);
        let node = walker.nextNode();
        while (node && !node.textContent.trim()) node = walker.nextNode();
        const r = document.createRange();
        r.setStart(node, 0);
        r.setEnd(node, 1);
        const first = r.getBoundingClientRect(), b = e.getBoundingClientRect();
        return b.right - first.right < 12 && first.left - b.left > 40; }""",
        text,
    )


def check_conversation(page) -> None:
    """The system prompt set apart, each turn with its role, Arabic laid out right to left, no tofu."""
    phrases = page.locator('.preflab-prompt [data-testid^="phrase:"]')
    expect(phrases).to_have_count(len(TURNS))
    roles = page.locator('.preflab-prompt [class*="dialoguename"]').all_inner_texts()
    assert roles == [t["role"] for t in TURNS]
    for n, turn in enumerate(TURNS):
        expect(phrases.nth(n)).to_contain_text(turn["content"])
    system = page.locator(".preflab-system")
    expect(system).to_be_visible()
    expect(system).to_contain_text(SYSTEM)
    expect(page.locator(".preflab-prompt")).not_to_contain_text(SYSTEM)
    assert rect(system)["bottom"] <= rect(page.locator(".preflab-prompt"))["top"]  # above the turns, apart
    assert right_to_left(phrases.nth(0).locator('[class*="wrapperText"]'), '[class*="dialoguetext"]')
    drawn = glyphs(page, '.preflab-prompt [data-testid="phrase:2"] [class*="dialoguetext"]', ["天", "蓝", "🌤", "🙂"])
    assert drawn["sameTofu"], drawn  # the reference: two unassigned code points look alike
    assert not any(g["tofu"] for g in drawn["glyphs"].values()), f"drawn as boxes (run `make system`): {drawn}"
    assert drawn["glyphs"]["🌤"]["colour"] and drawn["glyphs"]["🙂"]["colour"], f"emoji not in colour: {drawn}"


@pytest.fixture
def conversation_projects(lcli, sqlite_url, ls_env, tmp_path):
    """One conversation with four responses (one of 3,000 words, one of three turns), and a plain prompt,
    pushed to a project of every template; returns {template: project id} and the candidates' ids."""
    lines = [
        {"prompt": PROMPT, "responses": [LONG, ARABIC, MULTI, SHORT]},
        {"prompt": unique("What is 2 + 2?"), "responses": ["4", "Four."]},
    ]
    path = tmp_path / "conversation.jsonl"
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    lcli("import", "prompts", path)
    with session(sqlite_url) as s:
        ids = {
            name: s.scalar(select(Candidate.id).where(Candidate.content_hash == reply_hash(turns)))
            for name, turns in (
                ("long", [{"role": "assistant", "content": LONG}]),
                ("arabic", [{"role": "assistant", "content": ARABIC}]),
                ("multi", MULTI),
            )
        }
    projects = {}
    for template in TEMPLATES:
        projects[template] = json.loads(
            lcli("ls", "init", "--template", template, "--title", unique(f"conversation {template}"), "--json").stdout
        )["project_id"]
        lcli("ls", "push", "--project", projects[template])
    return projects, ids


def test_a_conversation_reads_well_in_every_template(lcli, sqlite_url, ls_env, tmp_path, conversation_projects):
    server = ls_env
    projects, ids = conversation_projects
    pushed = {t["id"]: t for t in tasks(sqlite_url)}
    remote = {
        template: {t.id: t.data for t in server.sdk().tasks.list(project=pid)} for template, pid in projects.items()
    }
    email, password = f"reader-{projects['ranking']}@preflab.test", "reader-password-1"
    server.signup(email, password)
    shots = tmp_path / "screenshots"
    shots.mkdir()

    with browser_page(height=HEIGHT) as page:
        log_in(page, server.url, email, password)
        for template, pid in projects.items():
            talk = next(
                tid
                for tid, data in remote[template].items()
                if isinstance(data["prompt"], list)
                and (
                    template != "pairwise"
                    or {item(ids["long"]), item(ids["multi"])} == {i["id"] for i in data["items"]}
                )
            )
            page.goto(f"{server.url}/projects/{pid}/data?task={talk}")
            expect(page.locator('.preflab-prompt [data-testid="phrase:4"]')).to_be_visible()
            page.wait_for_load_state("networkidle")
            check_conversation(page)
            if template == "pairwise":
                answers = page.locator(".preflab-answer")
                expect(answers).to_have_count(2)
                multi = answers.filter(has_text=MULTI[1]["content"])
                long = answers.filter(has_text=LONG[:200])
                text = long.locator(".lsf-richtext__container")
            else:
                cards = page.locator(".htx-ranker-item")
                expect(cards).to_have_count(4)
                assert ids_on_screen(page) == [item(c) for c in pushed[talk]["shown"]]  # the order preflab stored
                multi = page.locator(f'[data-ranker-id="{item(ids["multi"])}"]')
                long = page.locator(f'[data-ranker-id="{item(ids["long"])}"]')
                text = long.locator("p").first
                assert right_to_left(page.locator(f'[data-ranker-id="{item(ids["arabic"])}"] p').first)
                for n in range(4):  # every card capped, and all four on the screen at once
                    box = rect(cards.nth(n))
                    assert box["height"] <= CARD_CAP and box["top"] >= 0 and box["bottom"] <= HEIGHT, box
            assert multi.locator(".preflab-role").all_inner_texts() == [t["role"] for t in MULTI]  # its turns
            assert rect(long)["height"] <= CARD_CAP
            shown = rect(text)
            assert shown["client"] <= TEXT_CAP and shown["scroll"] > 5 * shown["client"], shown  # it scrolls
            text.evaluate("e => e.scrollTop = e.scrollHeight")
            assert text.evaluate("e => e.scrollTop") > 0
            text.evaluate("e => e.scrollTop = 0")
            page.wait_for_timeout(500)
            page.screenshot(path=str(shots / f"ls-conversation-{template}.png"))
            shutil.copy(shots / f"ls-conversation-{template}.png", ARTIFACTS)

        # A plain prompt looks as it did: its text alone, no system box, no role.
        plain = next(tid for tid, data in remote["ranking"].items() if isinstance(data["prompt"], str))
        page.goto(f"{server.url}/projects/{projects['ranking']}/data?task={plain}")
        expect(page.locator(".preflab-prompt")).to_contain_text(pushed[plain]["prompt"])
        page.wait_for_load_state("networkidle")
        expect(page.locator(".preflab-system")).to_be_hidden()
        expect(page.locator('.preflab-prompt [class*="dialoguename"]')).to_be_hidden()

        # An annotator ranks the conversation's responses by dragging, and picks a side of a pair by clicking it.
        talk = next(tid for tid, data in remote["ranking"].items() if isinstance(data["prompt"], list))
        page.goto(f"{server.url}/projects/{projects['ranking']}/data?task={talk}")
        cards = page.locator(".htx-ranker-item")
        expect(cards).to_have_count(4)
        page.wait_for_load_state("networkidle")
        shown = ids_on_screen(page)
        drag(page, cards.nth(3), cards.nth(0))
        after = ids_on_screen(page)
        assert after == [shown[3], *shown[:3]]
        submit(page, server, talk)
        pair = next(
            tid
            for tid, data in remote["pairwise"].items()
            if {i["id"] for i in data["items"]} == {item(ids["long"]), item(ids["multi"])}
        )
        page.goto(f"{server.url}/projects/{projects['pairwise']}/data?task={pair}")
        expect(page.locator(".preflab-answer")).to_have_count(2)
        page.wait_for_load_state("networkidle")
        page.locator(".preflab-answer").filter(has_text=MULTI[1]["content"]).locator(".preflab-role").first.click()
        submit(page, server, pair)

    for template in ("ranking", "pairwise"):
        summary = json.loads(lcli("ls", "sync", "--project", projects[template], "--json").stdout)
        assert (summary["new"], summary["quarantined"]) == (1, 0)
    by_task = {r["task"]: r["tiers"] for r in rankings(sqlite_url)}
    assert by_task == {talk: [[int(i[1:])] for i in after], pair: [[ids["multi"]], [ids["long"]]]}


def submit(page, server, task_id: int) -> None:
    """Press Submit and wait until Label Studio holds the annotation."""
    page.get_by_role("button", name="Submit").click()
    sdk, deadline = server.sdk(), time.monotonic() + 60
    while not list(sdk.annotations.list(task_id)) and time.monotonic() < deadline:
        page.wait_for_timeout(500)
