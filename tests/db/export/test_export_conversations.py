"""`preflab export` of conversations: TRL's conversational rows (explicit or implicit prompt), plain text
rendered with a model's chat template, and plain text refused where it cannot hold the history."""

import json

import pytest
from sqlalchemy import func, select

from preflab.db.export.dataset import load_export
from preflab.db.models import DatasetVersion
from tests.db.helpers import write_lines

HISTORY = [
    {"role": "system", "content": "Answer in French."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Bonjour !"},
    {"role": "user", "content": "How are you?"},
]
# An arena battle that went on after the first reply: the candidate is all of its turns.
BATTLE = [
    {"role": "assistant", "content": "Très bien."},
    {"role": "user", "content": "And you?"},
    {"role": "assistant", "content": "Aussi."},
]


def assistant(text):
    return [{"role": "assistant", "content": text}]


@pytest.fixture
def conversations(cli, tmp_path):
    """Two prompts: a plain question, and a four-message history whose best reply is three turns long."""
    lines = [
        {
            "prompt": "Plain question?",
            "responses": ["Good answer.", "Bad answer."],
            "ranking": [[0], [1]],
            "annotator": "alice",
            "id": "plain",
        },
        {
            "prompt": HISTORY,
            "responses": [BATTLE, "Bien.", "Mal."],
            "ranking": [[0], [1], [2]],
            "annotator": "alice",
            "id": "chat",
        },
    ]
    cli("import", "rankings", write_lines(tmp_path / "r.jsonl", [json.dumps(line) for line in lines]))
    cli("pairs", "build")
    return cli


def train_rows(path):
    """The rows of an export's train split."""
    return load_export(path)["train"].to_list()


def test_the_default_export_is_trl_conversational_with_the_whole_history(conversations, tmp_path):
    info = json.loads(conversations("export", tmp_path / "out", "--test-size", "0", "--json").stdout)
    assert (info["conversational"], info["prompt"], info["chat_template"]) == (True, "explicit", None)
    rows = train_rows(tmp_path / "out")
    chat = [r for r in rows if r["prompt"] == HISTORY]
    assert len(chat) == 3 and len(rows) == 4
    pairs = {(json.dumps(r["chosen"]), json.dumps(r["rejected"])) for r in chat}
    assert pairs == {
        (json.dumps(BATTLE), json.dumps(assistant("Bien."))),
        (json.dumps(BATTLE), json.dumps(assistant("Mal."))),
        (json.dumps(assistant("Bien.")), json.dumps(assistant("Mal."))),
    }
    (plain,) = [r for r in rows if r["prompt"] != HISTORY]
    assert plain["prompt"] == [{"role": "user", "content": "Plain question?"}]
    assert (plain["chosen"], plain["rejected"]) == (assistant("Good answer."), assistant("Bad answer."))
    card = (tmp_path / "out" / "README.md").read_text()
    assert "Form: **conversational, explicit prompt**" in card


def test_the_implicit_prompt_form_puts_the_history_inside_chosen_and_rejected(conversations, tmp_path):
    conversations("export", tmp_path / "out", "--test-size", "0", "--prompt", "implicit", "--format", "parquet")
    split = load_export(tmp_path / "out")["train"]
    assert "prompt" not in split.column_names
    whole = {(json.dumps(r["chosen"]), json.dumps(r["rejected"])) for r in split.to_list()}
    assert (json.dumps(HISTORY + BATTLE), json.dumps(HISTORY + assistant("Mal."))) in whole
    assert (
        json.dumps([{"role": "user", "content": "Plain question?"}, *assistant("Good answer.")]),
        json.dumps([{"role": "user", "content": "Plain question?"}, *assistant("Bad answer.")]),
    ) in whole
    card = (tmp_path / "out" / "README.md").read_text()
    assert "Form: **conversational, implicit prompt**" in card and "no `prompt` column" in card


def test_plain_text_of_a_conversation_stops_with_one_line_and_writes_nothing(conversations, sessions, tmp_path):
    result = conversations("export", tmp_path / "out", "--no-conversational", expect_ok=False)
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: 2 of the prompts and replies to export are conversations of several messages, which plain text "
        "cannot hold: export them with --conversational (the default), or render them as text with "
        "--chat-template MODEL"
    )
    assert not (tmp_path / "out").exists()
    with sessions.begin() as session:
        assert session.scalar(select(func.count()).select_from(DatasetVersion)) == 0
    for args, message in (
        (["--no-conversational", "--prompt", "implicit"], "--prompt implicit as plain text"),
        (["--conversational", "--chat-template", "m"], "--chat-template renders plain text"),
    ):
        result = conversations("export", tmp_path / "out", *args, expect_ok=False)
        assert result.exit_code == 1 and message in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.slow
def test_chat_template_renders_plain_text_with_the_models_template(conversations, tmp_path):
    from transformers import AutoTokenizer

    from tests.tiny_models import tiny_causal_lm

    model = tiny_causal_lm(tmp_path / "lm")
    tokenizer = AutoTokenizer.from_pretrained(model)

    def render(messages, generation=False):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)

    info = json.loads(
        conversations(
            "export", tmp_path / "text", "--chat-template", model, "--test-size", "0", "--format", "jsonl", "--json"
        ).stdout
    )
    assert (info["conversational"], info["chat_template"]) == (False, str(model))
    rows = train_rows(tmp_path / "text")
    head = render(HISTORY, generation=True)
    assert head.startswith("<|im_start|>system\nAnswer in French.<|im_end|>\n") and head.endswith(
        "<|im_start|>assistant\n"
    )
    chat = [r for r in rows if r["prompt"] == head]
    assert len(chat) == 3
    assert {r["prompt"] + r["chosen"] for r in chat} == {render(HISTORY + BATTLE), render(HISTORY + assistant("Bien."))}
    card = (tmp_path / "text" / "README.md").read_text()
    assert f"Form: **plain text rendered with the chat template of {model}**" in card

    conversations("export", tmp_path / "whole", "--chat-template", model, "--prompt", "implicit", "--test-size", "0")
    texts = {r["chosen"] for r in train_rows(tmp_path / "whole")}
    assert (
        render(HISTORY + BATTLE) in texts
        and render([{"role": "user", "content": "Plain question?"}, *assistant("Good answer.")]) in texts
    )


def test_an_export_rewritten_in_place_is_read_fresh_by_load_dataset(conversations, tmp_path):
    # `load_dataset` caches a folder read through its card by the folder's name and the card's configs: the
    # card's description changes with the content and the form, so a second export is not read from that cache.
    from datasets import load_dataset

    out = tmp_path / "prefs"
    conversations("export", out, "--format", "parquet", "--test-size", "0")
    assert "prompt" in load_dataset(str(out))["train"].column_names
    conversations("export", out, "--format", "parquet", "--test-size", "0", "--prompt", "implicit")
    assert "prompt" not in load_dataset(str(out))["train"].column_names
