"""A prompt is a conversation: the message model, its hashes, its storage and its migration."""

import json

import pytest
from alembic import command
from sqlalchemy import insert, select

from preflab.db.conversation import (
    prompt_columns,
    prompt_hash,
    prompt_messages,
    reply_columns,
    reply_hash,
    reply_messages,
    shared_prefix,
    stored_prompt,
    stored_reply,
    transcript,
)
from preflab.db.engine import alembic_config, make_engine, open_database, session_factory, upgrade
from preflab.db.models import Candidate, Prompt, Ranking, RankingItem, RawRecord
from preflab.db.store import content_hash
from preflab.errors import Invalid
from tests.db.helpers import ranking_line, write_lines

HISTORY = [
    {"role": "system", "content": "Answer in one sentence."},
    {"role": "user", "content": "What is a list?"},
    {"role": "assistant", "content": "An ordered collection."},
    {"role": "user", "content": "And a tuple?"},
]


def test_a_plain_prompt_is_one_user_turn_and_keeps_its_hash():
    turns = prompt_messages("What is recursion?")
    assert turns == [{"role": "user", "content": "What is recursion?"}]
    assert prompt_hash(turns) == content_hash("What is recursion?")
    assert prompt_columns(turns) == {"text": "What is recursion?", "messages": None}
    assert reply_hash(reply_messages("Recursion is…", "r")) == content_hash("Recursion is…")


def test_a_conversation_is_stored_with_its_messages_and_its_last_user_turn_as_text():
    turns = prompt_messages(HISTORY)
    columns = prompt_columns(turns)
    assert columns == {"text": "And a tuple?", "messages": HISTORY}
    assert stored_prompt(columns["text"], columns["messages"]) == HISTORY
    # The history is part of the identity: the same last turn after another history is another prompt.
    assert prompt_hash(turns) != prompt_hash(prompt_messages(HISTORY[1:]))
    assert prompt_hash(turns) != content_hash("And a tuple?")
    # Spelling that normalises the same (NFC, surrounding space) is the same prompt.
    respaced = [dict(m, content=f"  {m['content']} ") for m in HISTORY]
    assert prompt_hash(prompt_messages(respaced)) == prompt_hash(turns)


def test_a_reply_of_several_turns_keeps_them():
    turns = reply_messages(
        [
            {"role": "assistant", "content": "A."},
            {"role": "user", "content": "More?"},
            {"role": "assistant", "content": "B."},
        ],
        "r",
    )
    columns = reply_columns(turns)
    assert columns["messages"] == turns and columns["text"] == "Assistant: A.\n\nUser: More?\n\nAssistant: B."
    assert stored_reply(columns["text"], columns["messages"]) == turns
    assert stored_reply("plain", None) == [{"role": "assistant", "content": "plain"}]
    assert transcript(HISTORY[:2]) == "System: Answer in one sentence.\n\nUser: What is a list?"


def test_unknown_keys_are_not_modelled():
    turns = prompt_messages([{"role": "user", "content": "Hi", "name": "ann", "tool_calls": []}])
    assert turns == [{"role": "user", "content": "Hi"}]


@pytest.mark.parametrize(
    "value, reason",
    [
        ([], "'prompt' must be a non-empty string or a non-empty list of messages"),
        ("   ", "'prompt' must be a non-empty string or a non-empty list of messages"),
        (
            [{"role": "bot", "content": "x"}],
            "'prompt'[0] has an unknown role 'bot' (expected system, user or assistant)",
        ),
        ([{"content": "x"}], "'prompt'[0] has no role (expected system, user or assistant)"),
        (
            [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
            "'prompt' ends with an assistant turn; a prompt ends with the user's message",
        ),
        (
            [{"role": "system", "content": "x"}, {"role": "user", "content": 3}],
            "'prompt'[1] 'content' must be a string, not int",
        ),
        ([{"role": "user"}], "'prompt'[0] 'content' must be a string, not missing"),
        (["hello"], "'prompt'[0] is str, not a message (an object with 'role' and 'content')"),
        ([{"role": "user", "content": " "}], "'prompt'[0] (the last user turn) is empty"),
    ],
)
def test_a_malformed_prompt_names_the_field_and_index(value, reason):
    with pytest.raises(Invalid) as caught:
        prompt_messages(value)
    assert str(caught.value) == reason


def test_a_reply_starts_and_ends_with_the_assistant():
    with pytest.raises(Invalid, match=r"'responses'\[1\]\[0\] is a user turn; a reply starts and ends"):
        reply_messages([{"role": "user", "content": "x"}], "'responses'[1]")


def test_shared_prefix():
    assert shared_prefix(HISTORY, [*HISTORY[:2], {"role": "assistant", "content": "Other."}]) == 2
    assert shared_prefix(HISTORY, HISTORY) == 4


# --- every way in: import rankings and import prompts --------------------------------------


def test_import_rankings_takes_conversations_and_quarantines_malformed_ones(cli, db_url, tmp_path):
    multi = [
        {"role": "assistant", "content": "A tuple is fixed."},
        {"role": "user", "content": "Example?"},
        {"role": "assistant", "content": "(1, 2)."},
    ]
    path = write_lines(
        tmp_path / "r.jsonl",
        [
            ranking_line(HISTORY, ["An immutable list.", multi, "No idea."], [[1], [0], [2]], id="c1"),
            ranking_line("What is a list?", ["An ordered collection.", "A set."], [0, 1], id="p1"),
            ranking_line(HISTORY[:3], ["x", "y"], [0, 1], id="bad-end"),
            ranking_line(HISTORY, ["x", [{"role": "assistant", "content": 5}]], [0, 1], id="bad-content"),
            ranking_line([{"role": "robot", "content": "hi"}], ["x", "y"], [0, 1], id="bad-role"),
        ],
    )
    result = cli("import", "rankings", str(path), "--json")
    summary = json.loads(result.output)
    assert (summary["imported"], summary["quarantined"]) == (2, 3)
    again = json.loads(cli("import", "rankings", str(path), "--json").output)
    assert again["imported"] == 0 and again["new_prompts"] == 0

    sessions = session_factory(open_database(db_url))
    with sessions() as session:
        reasons = sorted(session.scalars(select(RawRecord.reason).where(RawRecord.reason.is_not(None))))
        prompts = {p.text: p for p in session.scalars(select(Prompt))}
        conversation = prompts["And a tuple?"]
        candidates = {
            c.text: c for c in session.scalars(select(Candidate).where(Candidate.prompt_id == conversation.id))
        }
        ranking = session.scalars(select(Ranking).where(Ranking.external_id == "c1")).one()
        tiers = [[session.get(Candidate, cid).text for cid in tier] for tier in ranking.tiers()]
    assert reasons == [
        "'prompt' ends with an assistant turn; a prompt ends with the user's message",
        "'prompt'[0] has an unknown role 'robot' (expected system, user or assistant)",
        "'responses'[1][0] 'content' must be a string, not int",
    ]
    assert conversation.messages == HISTORY and conversation.content_hash == prompt_hash(HISTORY)
    assert prompts["What is a list?"].messages is None
    assert prompts["What is a list?"].content_hash == content_hash("What is a list?")
    multi_text = "Assistant: A tuple is fixed.\n\nUser: Example?\n\nAssistant: (1, 2)."
    assert candidates[multi_text].messages == multi and candidates["An immutable list."].messages is None
    assert tiers == [[multi_text], ["An immutable list."], ["No idea."]]


def test_import_prompts_takes_conversations(cli, db_url, tmp_path):
    path = write_lines(
        tmp_path / "p.jsonl", [json.dumps({"prompt": HISTORY}), json.dumps({"prompt": "Plain?", "responses": ["Yes."]})]
    )
    summary = json.loads(cli("import", "prompts", str(path), "--json").output)
    assert summary["imported"] == 2
    with session_factory(open_database(db_url))() as session:
        stored = {p.text: stored_prompt(p.text, p.messages) for p in session.scalars(select(Prompt))}
    assert stored == {"And a tuple?": HISTORY, "Plain?": [{"role": "user", "content": "Plain?"}]}


# --- the migration converts a store holding data --------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_the_migration_keeps_every_id_of_a_store_made_before_conversations(backend, tmp_path, request):
    url = f"sqlite:///{tmp_path / 'old.db'}" if backend == "sqlite" else request.getfixturevalue("empty_postgres_url")
    engine = make_engine(url)
    command.upgrade(alembic_config(engine), "0008")
    with engine.begin() as conn:  # a store as preflab wrote it before conversations (no messages column)
        conn.execute(
            insert(Prompt.__table__),
            [{"id": 7, "text": "What is recursion?", "content_hash": content_hash("What is recursion?")}],
        )
        conn.execute(
            insert(Candidate.__table__),
            [
                {"id": cid, "prompt_id": 7, "text": text, "content_hash": content_hash(text)}
                for cid, text in ((11, "A function calling itself."), (12, "A loop."))
            ],
        )
    upgrade(engine)
    sessions = session_factory(open_database(url))
    with sessions() as session:
        prompt = session.get(Prompt, 7)
        assert (prompt.text, prompt.messages) == ("What is recursion?", None)
        assert stored_prompt(prompt.text, prompt.messages) == [{"role": "user", "content": "What is recursion?"}]
        assert [c.messages for c in prompt.candidates] == [None, None]
    # A ranking of the same prompt and replies, imported after the migration, lands on the old rows.
    path = write_lines(
        tmp_path / "r.jsonl", [ranking_line("What is recursion?", ["A function calling itself.", "A loop."], [0, 1])]
    )
    from click.testing import CliRunner

    from preflab.cli import cli

    result = CliRunner().invoke(cli, ["--database-url", url, "import", "rankings", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["new_prompts"] == 0
    with sessions() as session:
        items = session.scalars(select(RankingItem).order_by(RankingItem.tier)).all()
        assert [(i.candidate_id, i.tier) for i in items] == [(11, 0), (12, 1)]
        assert session.scalar(select(Ranking.prompt_id)) == 7
    engine.dispose()
