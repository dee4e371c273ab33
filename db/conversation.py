"""Conversations: a prompt is a list of messages, a candidate is the continuation compared.

A message is `{"role": "system" | "user" | "assistant", "content": text}`, the
OpenAI and TRL shape. A **prompt** is the history so far and ends with the user's
message; a **reply** (a candidate) is what follows it: one assistant message, or
several turns (an arena battle that went on after the first reply), starting and
ending with the assistant.

Storage keeps the plain case plain. A prompt that is one user message is stored as
its text alone (`prompts.messages` NULL), with the content hash it always had, so
stores made before conversations keep their ids; likewise a reply that is one
assistant message. Anything longer keeps its messages in the `messages` column and
`text` holds a readable stand-in (a prompt's last user turn; a reply's transcript).
Only `role` and `content` are stored; other keys (`name`, tool fields) stay in the
raw record the messages were parsed from.

Validation raises `Invalid` with a reason naming the field and the index, e.g.
"'prompt'[2] has an unknown role 'bot' (expected system, user or assistant)".
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Sequence
from typing import Any

import orjson

from preflab.db.store import content_hash
from preflab.errors import Invalid

ROLES = ("system", "user", "assistant")
Message = dict[str, str]
Messages = list[Message]


def user_turn(text: str) -> Messages:
    return [{"role": "user", "content": text}]


def assistant_turn(text: str) -> Messages:
    return [{"role": "assistant", "content": text}]


def _shown(value: Any, width: int = 30) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def messages(value: Any, where: str) -> Messages:
    """A list of messages checked for shape (role and content only); raises Invalid naming `where` and the index."""
    if not isinstance(value, list) or not value:
        raise Invalid(f"{where} must be a non-empty string or a non-empty list of messages")
    out: Messages = []
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise Invalid(
                f"{where}[{i}] is {type(message).__name__}, not a message (an object with 'role' and 'content')"
            )
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise Invalid(
                f"{where}[{i}] has {'no role' if role is None else f'an unknown role {_shown(role)}'} "
                "(expected system, user or assistant)"
            )
        if not isinstance(content, str):
            raise Invalid(
                f"{where}[{i}] 'content' must be a string, not "
                f"{'missing' if content is None else type(content).__name__}"
            )
        out.append({"role": role, "content": content})
    return out


def prompt_messages(value: Any, where: str = "'prompt'") -> Messages:
    """A prompt as messages: a string is one user turn; a list must end with a non-empty user turn."""
    if isinstance(value, str):
        if not value.strip():
            raise Invalid(f"{where} must be a non-empty string or a non-empty list of messages")
        return user_turn(value)
    turns = messages(value, where)
    last = turns[-1]
    if last["role"] != "user":
        raise Invalid(
            f"{where} ends with {'an' if last['role'] == 'assistant' else 'a'} {last['role']} turn; "
            "a prompt ends with the user's message"
        )
    if not last["content"].strip():
        raise Invalid(f"{where}[{len(turns) - 1}] (the last user turn) is empty")
    return turns


def reply_messages(value: Any, where: str) -> Messages:
    """A reply as messages: a string is one assistant turn; a list starts and ends with the assistant."""
    if isinstance(value, str):
        if not value.strip():
            raise Invalid(f"{where} is not a non-empty string")
        return assistant_turn(value)
    turns = messages(value, where)
    for i in (0, len(turns) - 1):
        if turns[i]["role"] != "assistant":
            raise Invalid(f"{where}[{i}] is a {turns[i]['role']} turn; a reply starts and ends with the assistant")
    if not any(t["content"].strip() for t in turns):
        raise Invalid(f"{where} is empty")
    return turns


def _is_single(turns: Sequence[Message], role: str) -> bool:
    return len(turns) == 1 and turns[0]["role"] == role


def turns_hash(turns: Sequence[Message], single_role: str) -> str:
    """The identity of a prompt (`single_role` "user") or a reply ("assistant").

    One message in that role hashes as its text alone (`content_hash`), as before
    conversations; anything else hashes its roles and NFC-normalised, stripped contents.
    """
    if _is_single(turns, single_role):
        return content_hash(turns[0]["content"])
    canonical = [[t["role"], unicodedata.normalize("NFC", t["content"]).strip()] for t in turns]
    return hashlib.sha256(b"messages:" + orjson.dumps(canonical)).hexdigest()


def prompt_hash(turns: Sequence[Message]) -> str:
    return turns_hash(turns, "user")


def reply_hash(turns: Sequence[Message]) -> str:
    return turns_hash(turns, "assistant")


def transcript(turns: Sequence[Message]) -> str:
    """Messages as plain text, each turn headed by its role ("System:", "User:", "Assistant:")."""
    return "\n\n".join(f"{t['role'].capitalize()}: {t['content']}" for t in turns)


def prompt_columns(turns: Sequence[Message]) -> dict[str, Any]:
    """What `prompts` stores: `text` (the last user turn) and `messages` (NULL for one user turn)."""
    if _is_single(turns, "user"):
        return {"text": turns[0]["content"], "messages": None}
    return {"text": turns[-1]["content"], "messages": list(turns)}


def reply_columns(turns: Sequence[Message]) -> dict[str, Any]:
    """What `candidates` stores: `text` (the reply, or its transcript) and `messages` (NULL for one turn)."""
    if _is_single(turns, "assistant"):
        return {"text": turns[0]["content"], "messages": None}
    return {"text": transcript(turns), "messages": list(turns)}


def stored_prompt(text: str, stored: Sequence[Message] | None) -> Messages:
    """A stored prompt's messages (the `text` and `messages` columns)."""
    return list(stored) if stored else user_turn(text)


def stored_reply(text: str, stored: Sequence[Message] | None) -> Messages:
    """A stored candidate's messages (the `text` and `messages` columns)."""
    return list(stored) if stored else assistant_turn(text)


def is_multi_turn(turns: Sequence[Message]) -> bool:
    """Whether a prompt is more than one user message (plain text cannot hold it without a template)."""
    return not _is_single(turns, "user")


def shared_prefix(a: Sequence[Message], b: Sequence[Message]) -> int:
    """How many leading messages two conversations share (same role, same content)."""
    n = 0
    for x, y in zip(a, b):
        if x["role"] != y["role"] or x["content"] != y["content"]:
            break
        n += 1
    return n


def compact(turns: Sequence[Message]) -> str | Messages:
    """A prompt as the model code takes it: its text when it is one user message, else its messages."""
    return turns[0]["content"] if _is_single(turns, "user") else list(turns)
