"""`preflab ls push --prompt-id/--source/--split/--limit` through a real Label Studio server.

The prompts are chosen as `generate` chooses them (`PromptSelection`): only the
chosen prompts become tasks, and a later push of the others adds theirs.
"""

import json

from sqlalchemy import select

from preflab.db.models import Prompt
from tests.db.helpers import ranking_line, write_lines
from tests.labelling.ls_helpers import unique


def user(text):
    return {"role": "user", "content": text}


def bot(text):
    return {"role": "assistant", "content": text}


def battle(qid, question, a, b, winner="model_a"):
    """A lmsys/chatbot_arena_conversations row."""
    return {
        "question_id": qid,
        "model_a": "vicuna-13b",
        "model_b": "koala-13b",
        "winner": winner,
        "judge": "arena_user_1",
        "conversation_a": [user(question), bot(a)],
        "conversation_b": [user(question), bot(b)],
        "turn": 1,
        "anony": True,
        "language": "English",
        "tstamp": 1682351591.1322,
    }


def store(cli, tmp_path) -> dict[str, str]:
    """Rankings with a `source` field, and Arena battles, one on a prompt the rankings stored first."""
    texts = {name: unique(name) for name in ("chat 1", "chat 2", "math 1", "arena 1", "arena 2")}
    lines = [
        ranking_line(texts[name], [unique(f"{name} a"), unique(f"{name} b")], [[0], [1]], source=source, id=name)
        for name, source in (("chat 1", "chat"), ("chat 2", "chat"), ("math 1", "math"))
    ]
    cli("import", "rankings", write_lines(tmp_path / "rankings.jsonl", lines))
    rows = [
        battle("q1", texts["arena 1"], unique("arena 1 a"), unique("arena 1 b")),
        battle("q2", texts["arena 2"], unique("arena 2 a"), unique("arena 2 b"), winner="tie"),
        battle("q3", texts["math 1"], unique("math 1 c"), unique("math 1 d"), winner="model_b"),
    ]
    cli("import", "dataset", "--format", "arena", write_lines(tmp_path / "arena.jsonl", map(json.dumps, rows)))
    return texts


def project(cli) -> int:
    return json.loads(cli("ls", "init", "--title", unique("choose prompts"), "--json").stdout)["project_id"]


def remote(ls_env, pid) -> list[str]:
    return sorted(t.data["prompt"] for t in ls_env.sdk().tasks.list(project=pid))


def ids(sessions, texts: dict[str, str], *names: str) -> list[int]:
    with sessions.begin() as session:
        found = dict(session.execute(select(Prompt.text, Prompt.id)).all())
    return [found[texts[name]] for name in names]


def test_push_only_the_prompts_named_by_id(cli, sessions, ls_env, tmp_path):
    texts = store(cli, tmp_path)
    chat1, math1, arena2 = ids(sessions, texts, "chat 1", "math 1", "arena 2")
    pid = project(cli)
    pushed = json.loads(
        cli("ls", "push", "--project", pid, "--prompt-id", chat1, "--prompt-id", f"{arena2},{math1}", "--json").stdout
    )
    assert (pushed["created"], pushed["waiting"]) == (3, 0)
    assert remote(ls_env, pid) == sorted([texts["chat 1"], texts["math 1"], texts["arena 2"]])
    # The others are pushed by a push without a selection, and nothing twice.
    assert json.loads(cli("ls", "push", "--project", pid, "--json").stdout)["created"] == 2
    assert remote(ls_env, pid) == sorted(texts.values())


def test_push_the_prompts_of_one_source_a_few_at_a_time(cli, ls_env, tmp_path):
    texts = store(cli, tmp_path)
    pid = project(cli)
    # import:arena: the two prompts the Arena import stored, and "math 1", whose prompt the rankings import
    # stored first (with its own source, math) and which an Arena battle ranked too.
    first = json.loads(cli("ls", "push", "--project", pid, "--source", "import:arena", "--limit", 2, "--json").stdout)
    assert (first["created"], first["waiting"]) == (2, 1)
    line = cli("ls", "push", "--project", pid, "--source", "import:arena").stdout
    assert line.startswith("created 1 task in project") and "2 already there" in line
    assert remote(ls_env, pid) == sorted([texts["math 1"], texts["arena 1"], texts["arena 2"]])
    # A source a record gave: only those prompts.
    assert json.loads(cli("ls", "push", "--project", pid, "--source", "chat", "--json").stdout)["created"] == 2
    assert remote(ls_env, pid) == sorted(texts.values())


def test_a_selection_that_names_nothing_is_one_sentence_and_pushes_nothing(cli, ls_env, tmp_path):
    store(cli, tmp_path)
    pid = project(cli)
    unknown = cli("ls", "push", "--project", pid, "--source", "import:hh-rlhf", expect_ok=False)
    assert unknown.exit_code == 1
    assert unknown.output == (
        "Error: no stored prompt comes from source 'import:hh-rlhf'; the stored sources "
        "include chat, import:arena, import:rankings, math\n"
    )
    missing = cli("ls", "push", "--project", pid, "--prompt-id", 99999, expect_ok=False)
    assert missing.exit_code == 1
    assert missing.output == "Error: no stored prompt has id 99999 (see `preflab stats`)\n"
    bad = cli("ls", "push", "--project", pid, "--prompt-id", "3;4", expect_ok=False)
    assert bad.exit_code != 0 and "--prompt-id takes prompt ids separated by commas, got '3;4'" in bad.output
    assert remote(ls_env, pid) == []
