"""Conversations in Label Studio tasks: what push writes, what sync and import read back, what is quarantined."""

import json
import re

import pytest
from sqlalchemy import select

from preflab.db.conversation import assistant_turn, prompt_hash, reply_hash, user_turn
from preflab.db.models import Candidate, LSTask, Prompt
from preflab.db.store import content_hash
from preflab.errors import InputError, Invalid
from preflab.labelling.studio.parse import TaskFields, task_items
from preflab.labelling.studio.projects import ProjectInfo
from preflab.labelling.studio.push import plan_tasks
from preflab.labelling.studio.task_data import task_data
from preflab.templates import TEMPLATES, label_config, shows_conversations
from tests.labelling.ls_helpers import item, ranker_result, rankings, session, tasks, unique

SYSTEM = {"role": "system", "content": "Answer briefly."}
HISTORY = [
    SYSTEM,
    {"role": "user", "content": "ما هي عاصمة مصر؟"},
    {"role": "assistant", "content": "القاهرة."},
    {"role": "user", "content": "And of China? 🙂"},
]
MULTI = [
    {"role": "assistant", "content": "北京 <b>Beijing</b>."},
    {"role": "user", "content": "Sure?"},
    {"role": "assistant", "content": "Yes & sure."},
]


def test_a_task_shows_the_conversation_and_reads_back_as_stored():
    replies = {7: assistant_turn("Beijing."), 9: MULTI}
    for template in TEMPLATES:
        data = task_data(template, HISTORY, [9, 7], replies, "3:abc")
        assert data["prompt"] == HISTORY  # what sync reads back
        assert (data["system"], data["dialogue"]) == ("Answer briefly.", HISTORY[1:])  # what the template shows
        multi, plain = data["items"]
        assert plain == {"id": "c7", "title": "Response 2", "body": "Beijing."}  # a plain reply as before
        assert multi["messages"] == MULTI and "body" not in multi
        assert multi["html"].count('class="preflab-role"') == 3  # each turn with its role, escaped
        assert "&lt;b&gt;Beijing&lt;/b&gt;" in multi["html"] and "Yes &amp; sure." in multi["html"]
        back = task_items(data)
        assert (back.prompt, back.ids, back.replies) == (HISTORY, ("c9", "c7"), (MULTI, assistant_turn("Beijing.")))
        assert back.prompt_key == prompt_hash(HISTORY)
        assert back.reply_keys == (reply_hash(MULTI), content_hash("Beijing."))
        if template == "pairwise":
            assert data["left"].startswith("Assistant: 北京") and data["right"] == "Beijing."
            assert 'dir="auto"' in data["left_html"] and data["right_html"].endswith("Beijing.</span>")
    plain = task_data(
        "ranking", user_turn("What is 2+2?"), [1, 2], {1: assistant_turn("4"), 2: assistant_turn("5")}, "k"
    )
    assert (plain["prompt"], plain["system"], plain["dialogue"]) == ("What is 2+2?", "", user_turn("What is 2+2?"))
    assert task_items(plain).prompt_key == content_hash("What is 2+2?")  # a plain prompt keeps its old hash


def test_templates_show_conversations_and_old_configs_do_not():
    assert all(shows_conversations(label_config(name)) for name in TEMPLATES)
    old = '<View><Text name="prompt" value="$prompt"/><List name="responses" value="$items"/></View>'
    assert not shows_conversations(old) and not shows_conversations("") and not shows_conversations("<View")


@pytest.mark.parametrize(
    "data, reason",
    [
        (
            {"prompt": [{"role": "user", "content": "hi"}, {"role": "bot", "content": "x"}]},
            "task data 'prompt'[1] has an unknown role 'bot'",
        ),
        (
            {"prompt": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]},
            "task data 'prompt' ends with an assistant turn",
        ),
        ({"prompt": [{"role": "user", "content": 5}]}, "task data 'prompt'[0] 'content' must be a string, not int"),
        ({"prompt": [], "items": []}, "task data 'prompt' must be a non-empty string or a non-empty list of messages"),
        ({"prompt": {"role": "user"}}, "task data 'prompt' is dict, not text or a list of messages"),
        (
            {"items": [{"id": "a", "body": "x"}, {"id": "b", "body": [{"role": "user", "content": "y"}]}]},
            "item 'b' 'body'[0] is a user turn; a reply starts and ends with the assistant",
        ),
        (
            {"items": [{"id": "a", "body": "x"}, {"id": "b", "messages": [{"role": "assistant", "content": None}]}]},
            "item 'b' 'messages'[0] 'content' must be a string, not missing",
        ),
        (
            {"items": [{"id": "a", "body": "x"}, {"id": "b", "body": [{"role": "assistant", "content": "x"}]}]},
            "items 'a' and 'b' have the same text",
        ),
        ({"prompt": [{"role": "user", "content": "a\x00b"}]}, "task data 'prompt' [0]['content'] holds a NUL"),
    ],
)
def test_malformed_messages_are_invalid_naming_the_field_and_index(data, reason):
    data = {"prompt": "p", "items": [{"id": "a", "body": "x"}, {"id": "b", "body": "y"}]} | data
    with pytest.raises(Invalid, match=re.escape(reason)):
        task_items(data)


def test_push_refuses_conversations_to_a_project_made_before_them(lcli, sqlite_url, tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": HISTORY, "responses": ["a", "b"]}) + "\n", encoding="utf-8")
    lcli("import", "prompts", path)
    old = (
        '<View><Text name="prompt" value="$prompt"/><List name="responses" value="$items"/>'
        '<Ranker name="rank" toName="responses"/></View>'
    )
    with session(sqlite_url) as s:
        made_now = ProjectInfo(1, "http://ls.test", 9, "new", "ranking", label_config("ranking"))
        (task,), _ = plan_tasks(s, made_now)
        assert task.data["prompt"] == HISTORY
        with pytest.raises(InputError, match="project 9's labelling config cannot show conversations"):
            plan_tasks(s, ProjectInfo(1, "http://ls.test", 9, "old", "ranking", old))


def test_pair_fields_may_hold_messages():
    data = {"prompt": HISTORY, "answer1": MULTI, "answer2": "Beijing."}
    pair = task_items(data, TaskFields(pair_fields="answer1,answer2"))
    assert pair.replies == (MULTI, assistant_turn("Beijing."))


def export_task(task_id: int, data: dict, ranking: list[str]) -> dict:
    return {
        "id": task_id,
        "project": 42,
        "data": data,
        "annotations": [{"id": task_id * 10, "completed_by": 5, "result": ranker_result({"rank": ranking})}],
    }


def test_import_of_an_export_whose_fields_hold_messages(lcli, sqlite_url, tmp_path):
    plain = unique("What is the capital of Peru?")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": plain, "responses": ["Lima.", "Cusco."]}) + "\n", encoding="utf-8")
    lcli("import", "prompts", prompts)
    with session(sqlite_url) as s:
        before = dict(s.execute(select(Prompt.content_hash, Prompt.id)).all())
    named = [dict(SYSTEM, name="policy"), *HISTORY[1:]]  # a key beyond role and content is kept raw only
    items = [{"id": "a", "body": "Beijing."}, {"id": "b", "body": MULTI}, {"id": "c", "messages": MULTI[:1]}]
    export = [
        export_task(1, {"prompt": named, "items": items}, ["b", "a", "c"]),
        export_task(
            2, {"prompt": plain, "items": [{"id": "x", "body": "Lima."}, {"id": "y", "body": "Cusco."}]}, ["x", "y"]
        ),
        export_task(
            3, {"prompt": [HISTORY[1], {"role": "bot", "content": "?"}, HISTORY[3]], "items": items}, ["a", "b", "c"]
        ),
        export_task(4, {"prompt": HISTORY[:3], "items": items}, ["a", "b", "c"]),
        export_task(
            5,
            {
                "prompt": HISTORY,
                "items": [{"id": "a", "body": "x"}, {"id": "b", "body": [{"role": "assistant", "content": 1}]}],
            },
            ["a", "b"],
        ),
    ]
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export, ensure_ascii=False), encoding="utf-8")
    summary = json.loads(lcli("ls", "import", path, "--json").stdout)
    assert (summary["new"], summary["quarantined"]) == (2, 3)
    assert summary["reasons"] == {
        "task data 'prompt'[1] has an unknown role 'bot' (expected system, user or assistant)": 1,
        "task data 'prompt' ends with an assistant turn; a prompt ends with the user's message": 1,
        "item 'b' 'body'[0] 'content' must be a string, not int": 1,
    }

    with session(sqlite_url) as s:
        stored = {p.content_hash: p for p in s.scalars(select(Prompt))}
        conversation = stored[prompt_hash(HISTORY)]
        assert conversation.messages == HISTORY and conversation.text == HISTORY[-1]["content"]
        assert {h: p.id for h, p in stored.items() if h in before} == before  # the plain prompt kept its id
        replies = {
            c.content_hash: c for c in s.scalars(select(Candidate).where(Candidate.prompt_id == conversation.id))
        }
        assert replies[reply_hash(MULTI)].messages == MULTI  # several turns keep their messages; one is text
        assert replies[content_hash("Beijing.")].messages is None
        assert replies[content_hash(MULTI[0]["content"])].messages is None
        ids = {h: c.id for h, c in replies.items()}
    by_task = {r["task"]: r for r in rankings(sqlite_url)}
    assert by_task[1]["tiers"] == [
        [ids[reply_hash(MULTI)]],
        [ids[content_hash("Beijing.")]],
        [ids[content_hash(MULTI[0]["content"])]],
    ]
    assert len(by_task[2]["tiers"]) == 2
    again = json.loads(lcli("ls", "import", path, "--json").stdout)  # idempotent
    assert (again["new"], again["unchanged"], again["still_quarantined"]) == (0, 2, 3)


def test_push_sync_and_predict_a_conversation(cli, db_url, ls_env, tmp_path):
    server = ls_env
    question = unique("And of China?")
    history = [*HISTORY[:3], {"role": "user", "content": question}]
    multi = [{**MULTI[0], "content": unique(MULTI[0]["content"])}, *MULTI[1:]]
    plain = unique("Name a prime.")
    judged = {
        "prompt": history,
        "responses": [unique("Beijing."), multi, unique("Shanghai.")],
        "ranking": [[1], [0], [2]],
        "annotator": "judge-conv",
        "annotator_kind": "ai",
    }
    for kind, line in (("rankings", judged), ("prompts", {"prompt": plain, "responses": [unique("2"), unique("9")]})):
        (tmp_path / f"{kind}.jsonl").write_text(json.dumps(line, ensure_ascii=False) + "\n", encoding="utf-8")
        cli("import", kind, tmp_path / f"{kind}.jsonl")
    pid = json.loads(cli("ls", "init", "--template", "ranking", "--title", unique("conversation"), "--json").stdout)[
        "project_id"
    ]
    assert json.loads(cli("ls", "push", "--project", pid, "--json").stdout)["created"] == 2
    sdk = server.sdk()
    remote = {t.id: t.data for t in sdk.tasks.list(project=pid)}
    with session(db_url) as s:
        conversation = s.scalar(select(Prompt.id).where(Prompt.content_hash == prompt_hash(history)))
        task_of = dict(s.execute(select(LSTask.prompt_id, LSTask.task_id)).all())
        multi_id = s.scalar(select(Candidate.id).where(Candidate.content_hash == reply_hash(multi)))
    shown = {t["id"]: t for t in tasks(db_url)}
    talk, simple = remote[task_of[conversation]], next(d for tid, d in remote.items() if tid != task_of[conversation])
    assert (talk["prompt"], talk["system"], talk["dialogue"]) == (history, SYSTEM["content"], history[1:])
    assert [i["id"] for i in talk["items"]] == [item(c) for c in shown[task_of[conversation]]["shown"]]
    assert next(i for i in talk["items"] if i["id"] == item(multi_id))["messages"] == multi
    assert (simple["prompt"], simple["system"]) == (plain, "")  # a plain prompt's task as before

    predicted = json.loads(cli("ls", "predict", "--project", pid, "--json").stdout)
    assert (predicted["uploaded"], predicted["invalid"], predicted["refused"]) == (1, 0, 0)
    (prediction,) = sdk.predictions.list(task=task_of[conversation])
    assert prediction.result[0]["value"]["ranker"]["rank"][0] == item(multi_id)  # the judge's best first

    user = server.signup(f"conv-{pid}@preflab.test")
    for tid in remote:
        order = list(reversed(shown[tid]["shown"]))
        sdk.annotations.create(tid, completed_by=user, result=ranker_result({"rank": [item(c) for c in order]}))
    summary = json.loads(cli("ls", "sync", "--project", pid, "--json").stdout)
    assert (summary["new"], summary["quarantined"]) == (2, 0)
    got = {r["task"]: r["tiers"] for r in rankings(db_url) if r["kind"] == "human"}
    assert got == {tid: [[c] for c in reversed(shown[tid]["shown"])] for tid in remote}  # the stored candidates
    with session(db_url) as s:
        assert s.scalar(select(Prompt.id).where(Prompt.content_hash == prompt_hash(history))) == conversation
        assert len(s.scalars(select(Prompt.id)).all()) == 2  # sync made no new prompt or candidate
        assert len(s.scalars(select(Candidate.id)).all()) == 5
