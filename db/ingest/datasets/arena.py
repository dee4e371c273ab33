"""Chatbot Arena battles: two models answer the same user, and the user votes.

Three shapes, told apart by their columns:

- lmsys/chatbot_arena_conversations: `conversation_a`/`conversation_b` as messages,
  `winner` one of `model_a`, `model_b`, `tie`, `tie (bothbad)`, and the `judge` who voted;
- arena-human-preference-55k: `prompt`, `response_a`, `response_b`, each a JSON-encoded
  list of turns (the user's turns; each model's answers to them), and 0/1 columns
  `winner_model_a`, `winner_model_b`, `winner_tie`;
- arena-human-preference-140k: `conversation_a`/`conversation_b` whose message `content`
  is a list of `{type, text}` parts, `winner` one of `model_a`, `model_b`, `tie`, `both_bad`.

The winner ranks first; a tie (either kind) is one tier holding both replies, which
gives no pair. The verdict as the dataset wrote it is kept in the ranking's details
(`winner`), with `both_bad` saying which kind of tie it was where the shape tells.
`model_a`/`model_b` are the candidates' models. The votes are people's (Chatbot Arena's users):
the judge is the annotator, a person whom preflab knows only by pseudonym; the shapes without
one name the dataset, a human annotator. A row is read in the shape its own columns say
(`_shape`), so a reason names a field of that shape: a conversations row without `winner` is
told so. The 55k shape's 0/1 flags and id may come as 1.0, as pandas writes an integer column
with a missing value.

A battle may go on for several turns. The prompt is what both conversations share, up
to its last user turn (`split_shared`: the user's first message, and any identical
turns after it); each candidate is the rest of its conversation, however many turns.

Two models may give the same reply (the prompt "hi"). Such a battle is still a vote between two
models, and Arena's ratings count it: it is kept, as a ranking of its one reply (a ranking holds a
candidate once) whose details say the two models (`identical`: [model_a, model_b]) beside the verdict
(`winner`), which the leaderboard reads (`preflab.db.leaderboard.battles`). It gives no pair: the
export counts it among what it left out. Only a battle of two named models is kept so; without both
names, identical replies are quarantined, as every other format quarantines them.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from preflab.db.conversation import Messages, messages, reply_hash
from preflab.db.ingest.datasets.base import Format, choice, identifier, integer, ranking, split_shared
from preflab.db.ingest.records import RankingRecord, shown
from preflab.errors import Invalid

# winner -> (tiers of [a, b], whether it says both were bad: None where it does not tell)
VERDICTS: dict[str, tuple[list[list[int]], bool | None]] = {
    "model_a": ([[0], [1]], None),
    "model_b": ([[1], [0]], None),
    "tie": ([[0, 1]], False),
    "tie (bothbad)": ([[0, 1]], True),
    "both_bad": ([[0, 1]], True),
}
SIDES = ("a", "b")
TIES = frozenset(winner for winner, (tiers, _) in VERDICTS.items() if len(tiers) == 1)
IDENTICAL = "identical"  # the details key of a battle of identical replies: [model_a, model_b]
# The annotator of a shape without a judge: the dataset its votes were published in.
DATASETS = {
    "conversations": "lmsys/chatbot_arena_conversations",
    "55k": "lmarena-ai/arena-human-preference-55k",
    "140k": "lmarena-ai/arena-human-preference-140k",
}


def _text_parts(message: Any, where: str) -> Any:
    """A message whose `content` is a list of `{type, text}` parts (the 140k shape), with its text as content."""
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return message
    texts = []
    for j, part in enumerate(message["content"]):
        if not isinstance(part, dict):
            raise Invalid(f"{where} 'content'[{j}] is {type(part).__name__}, not a {{type, text}} part")
        if part.get("type") != "text":
            raise Invalid(
                f"{where} 'content'[{j}] is of type {shown(part.get('type'))}, not text "
                "(only text battles can be imported)"
            )
        if not isinstance(part.get("text"), str):
            raise Invalid(f"{where} 'content'[{j}] 'text' is {shown(part.get('text'))}, not a string")
        texts.append(part["text"])
    return {**message, "content": "\n\n".join(texts)}


def _conversation(row: dict[str, Any], side: str) -> Messages:
    key = f"conversation_{side}"
    value = row.get(key)
    if isinstance(value, list):
        value = [_text_parts(m, f"'{key}'[{i}]") for i, m in enumerate(value)]
    return messages(value, f"'{key}'")


def _turns(row: dict[str, Any], key: str) -> list[Any]:
    """One of the 55k shape's columns: a JSON-encoded list of turns (or the list itself)."""
    value = row.get(key)
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            try:  # the standard library takes an escaped lone surrogate, which `ranking` then names
                value = json.loads(value)
            except ValueError:
                raise Invalid(f"'{key}' is not a JSON list of turns") from None
    if not isinstance(value, list) or not value:
        raise Invalid(f"missing '{key}'" if value is None else f"'{key}' must be a non-empty JSON list of turns")
    return value


def _interleaved(row: dict[str, Any], side: str) -> Messages:
    """The 55k shape's conversation with one model: each user turn, then the model's answer to it."""
    asked, answered = _turns(row, "prompt"), _turns(row, f"response_{side}")
    if len(asked) != len(answered):
        raise Invalid(f"'prompt' has {len(asked)} turns but 'response_{side}' has {len(answered)}")
    out: Messages = []
    for i, (question, answer) in enumerate(zip(asked, answered)):
        for key, value in (("prompt", question), (f"response_{side}", answer)):
            if not isinstance(value, str):
                raise Invalid(f"'{key}'[{i}] is {shown(value)}, not text")
        out += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    return out


def _winner_55k(row: dict[str, Any]) -> str:
    """The 55k shape's verdict: the one of winner_model_a, winner_model_b and winner_tie that is 1."""
    flags = {name: integer(row, f"winner_{name}", (0, 1)) for name in ("model_a", "model_b", "tie")}
    won = [name for name, flag in flags.items() if flag == 1]
    if len(won) != 1:
        raise Invalid(
            f"unknown winner: winner_model_a, winner_model_b and winner_tie are "
            f"{', '.join(map(str, flags.values()))} (exactly one must be 1)"
        )
    return won[0]


def _shape(row: dict[str, Any]) -> str:
    """Which of the three shapes a row is in ("conversations", "55k" or "140k"), from the columns it fills."""
    if all(row.get(key) is None for key in ("winner", "conversation_a", "conversation_b")):
        return "55k"
    first = row.get("conversation_a")
    if "evaluation_session_id" in row or (
        isinstance(first, list) and any(isinstance(m, dict) and isinstance(m.get("content"), list) for m in first)
    ):
        return "140k"
    return "conversations"


def parse(row: dict[str, Any]) -> list[RankingRecord]:
    """One ranking of the battle's two replies by its winner; raises Invalid."""
    shape = _shape(row)
    if shape == "55k":
        winner = _winner_55k(row)
        conversations = [_interleaved(row, side) for side in SIDES]
        names = ("'response_a'", "'response_b'")
    else:
        winner = choice(row, "winner", tuple(VERDICTS))
        conversations = [_conversation(row, side) for side in SIDES]
        names = ("'conversation_a'", "'conversation_b'")
    models = [row.get(f"model_{side}") if isinstance(row.get(f"model_{side}"), str) else None for side in SIDES]
    named = all(m is not None and m.strip() for m in models)
    prompt, *replies = split_shared(*conversations, names=names, same=named)
    tiers, both_bad = VERDICTS[winner]
    details: dict[str, Any] = {"winner": winner}
    if both_bad is not None and shape != "55k":  # the 55k shape's winner_tie counts both kinds of tie
        details["both_bad"] = both_bad
    names = ("model_a's reply", "model_b's reply")
    if named and reply_hash(replies[0]) == reply_hash(replies[1]):
        # one reply, both models': a battle for the leaderboard, no pair
        replies, tiers, names = replies[:1], [[0]], ("the reply of model_a and model_b",)
        details[IDENTICAL] = models
    judge = row.get("judge")
    return [
        ranking(
            prompt,
            replies,
            tiers,
            judge if isinstance(judge, str) and judge.strip() else DATASETS[shape],
            models=models[: len(replies)],
            details=details,
            external_id=identifier(row.get("question_id", row.get("id"))),
            names=names,
            fewest=len(replies),
        )
    ]


def identical_battle(record: RankingRecord) -> bool:
    """Whether a ranking is a battle of two models whose replies were identical (one reply, both models')."""
    return bool(record.details and record.details.get(IDENTICAL))


EXAMPLE = (
    '{"question_id": "q1", "model_a": "vicuna-13b", "model_b": "alpaca-13b", "winner": "model_a", '
    '"judge": "arena_user_1", "turn": 1, "conversation_a": [{"role": "user", "content": "Hi!"}, '
    '{"role": "assistant", "content": "Hello! How can I help?"}], "conversation_b": [{"role": "user", '
    '"content": "Hi!"}, {"role": "assistant", "content": "hi"}]}'
)

FORMAT = Format(
    name="arena",
    columns=frozenset({"model_a", "model_b"}),
    parse=parse,
    example=EXAMPLE,
    annotator="the row's judge, else the dataset's name",
    kind="human",
    judged_by="Chatbot Arena users",
    texts=frozenset({"question_id", "model_a", "model_b", "winner", "judge", "prompt", "response_a", "response_b"}),
)
