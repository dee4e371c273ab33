"""A 3-turn conversation end to end: import → Label Studio (a screenshot) → judge → pairs → export → DPO.

The conversation is a user turn, the assistant's answer and the user's follow-up;
each step must carry the whole history: Label Studio shows every turn with its
role, the judge scores the replies given the history, the export writes the
history as the prompt's messages, and DPO trains on it through the chat template.
"""

import json
from pathlib import Path

import pytest
from playwright.sync_api import expect

from preflab.db.engine import open_database, session_factory
from preflab.db.export.dataset import load_export
from tests.labelling.browser import browser_page, log_in
from tests.labelling.ls_fixtures import ARTIFACTS
from tests.labelling.ls_helpers import unique

pytestmark = pytest.mark.slow


def conversation(i: int) -> list[dict]:
    return [
        {"role": "user", "content": f"Give me a number near {i}."},
        {"role": "assistant", "content": f"{i + 1}."},
        {"role": "user", "content": "Now one a bit larger, please."},
    ]


REPLIES = ["{n} is larger.", "Here is {n}.", "I would rather not."]


@pytest.fixture(scope="module")
def chat_lm(tmp_path_factory) -> Path:
    from tests.tiny_models import tiny_causal_lm

    return tiny_causal_lm(tmp_path_factory.mktemp("e2e") / "lm")


def test_a_three_turn_conversation_goes_from_import_to_a_dpo_step(lcli, sqlite_url, ls_env, tmp_path, chat_lm):
    server = ls_env
    marker = unique("near")
    prompts = [dict(conversation(i)[0], content=f"{conversation(i)[0]['content']} ({marker})") for i in range(8)]
    lines = [
        {"prompt": [p, *conversation(i)[1:]], "responses": [r.format(n=i + 5) for r in REPLIES]}
        for i, p in enumerate(prompts)
    ]
    path = tmp_path / "conversations.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    assert json.loads(lcli("import", "prompts", path, "--json").stdout)["imported"] == 8

    # Label Studio shows the history above the candidates, every turn with its role.
    project = json.loads(
        lcli("ls", "init", "--template", "ranking", "--title", unique("e2e conversation"), "--json").stdout
    )["project_id"]
    assert json.loads(lcli("ls", "push", "--project", project, "--json").stdout)["created"] == 8
    task = next(t for t in server.sdk().tasks.list(project=project))
    assert task.data["prompt"][-1]["content"] == "Now one a bit larger, please."
    email, password = f"e2e-{project}@preflab.test", "e2e-password-1"
    server.signup(email, password)
    with browser_page() as page:
        log_in(page, server.url, email, password)
        page.goto(f"{server.url}/projects/{project}/data?task={task.id}")
        phrases = page.locator('.preflab-prompt [data-testid^="phrase:"]')
        expect(phrases).to_have_count(3)
        page.wait_for_load_state("networkidle")
        assert page.locator('.preflab-prompt [class*="dialoguename"]').all_inner_texts() == [
            "user",
            "assistant",
            "user",
        ]
        for n, turn in enumerate(task.data["prompt"]):
            expect(phrases.nth(n)).to_contain_text(turn["content"])
        expect(page.locator(".htx-ranker-item")).to_have_count(3)
        page.screenshot(path=str(tmp_path / "e2e-conversation.png"))
        page.screenshot(path=str(ARTIFACTS / "e2e-conversation.png"))

    # An AI judge ranks the replies given the history; the pairs and the export keep it.
    judged = json.loads(lcli("judge", "likelihood", "--model", chat_lm, "--json").stdout)
    assert judged["ranked"] == 8
    assert json.loads(lcli("pairs", "build", "--json").stdout)["pairs"] == 8 * 3
    info = json.loads(
        lcli("export", tmp_path / "export", "--format", "parquet", "--test-size", "0.25", "--json").stdout
    )
    assert info["conversational"] is True
    rows = [r for split in load_export(tmp_path / "export").values() for r in split.to_list()]
    assert len(rows) == 24
    histories = {json.dumps(line["prompt"]) for line in lines}
    assert {json.dumps(r["prompt"]) for r in rows} == histories  # the whole history is the prompt
    assert all(
        len(r["chosen"]) == 1 and r["chosen"][0]["role"] == "assistant" and r["rejected"][0]["role"] == "assistant"
        for r in rows
    )

    # One DPO step on a tiny chat model, through its chat template.
    from preflab.training.config import DPOTrainConfig
    from preflab.training.methods import train

    config = DPOTrainConfig(
        max_steps=1, per_device_train_batch_size=4, learning_rate=1e-3, max_length=256, use_cpu=True, logging_steps=1
    )
    result = train("dpo", session_factory(open_database(sqlite_url)), config, str(chat_lm), info["name"])
    assert result.metrics["global_step"] == 1
