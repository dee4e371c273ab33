"""What a pushed task holds: its candidates' item ids, the seeded order they are shown in, and its data.

A task's data (`task_data`) is the whole conversation as the templates show it:
the prompt's messages, and each candidate as an item, a reply of several turns
as its turns (in HTML, escaped). `prompt` holds what `ls sync` reads back.
"""

from __future__ import annotations

import hashlib
import html
import random

from preflab.db.conversation import Messages, compact, reply_columns
from preflab.labelling.studio.parse import ITEM_TURNS, KEY_FIELD
from preflab.templates import DIALOGUE


def item_id(candidate_id: int) -> str:
    return f"c{candidate_id}"


def candidate_id(item: str) -> int | None:
    return int(item[1:]) if item.startswith("c") and item[1:].isdigit() else None


def candidate_set_hash(candidate_ids) -> str:
    return hashlib.sha256(",".join(map(str, sorted(candidate_ids))).encode()).hexdigest()


def shown_order(candidate_ids, seed: int, project_id: int, prompt_id: int) -> list[int]:
    """The candidates in the order a task shows them: a shuffle seeded by the task's identity."""
    order = sorted(candidate_ids)
    random.Random(f"{seed}:{project_id}:{prompt_id}:{candidate_set_hash(order)}").shuffle(order)
    return order


def split_system(prompt: Messages) -> tuple[str, Messages]:
    """The prompt's leading system messages (their text, joined) and the turns after them."""
    n = 0
    while n < len(prompt) - 1 and prompt[n]["role"] == "system":
        n += 1
    return "\n\n".join(t["content"] for t in prompt[:n]), list(prompt[n:])


def turns_html(turns: Messages) -> str:
    """A reply as the templates show it in HTML: its text, or each turn with its role; escaped, direction by content."""
    if len(turns) == 1 and turns[0]["role"] == "assistant":
        return f'<span class="preflab-text" dir="auto">{html.escape(turns[0]["content"])}</span>'
    return "".join(
        f'<span class="preflab-turn preflab-{t["role"]}"><span class="preflab-role">{t["role"]}</span>'
        f'<span class="preflab-text" dir="auto">{html.escape(t["content"])}</span></span>'
        for t in turns
    )


def task_data(template: str, prompt: Messages, order: list[int], replies: dict[int, Messages], key: str) -> dict:
    """A task's data for a preflab template: the conversation and the candidates in the order shown.

    A candidate of one assistant message is an item's `body`, as before; one of several
    turns is shown as `html` and read back from `messages`.
    """
    items = []
    for n, cid in enumerate(order):
        item: dict = {"id": item_id(cid), "title": f"Response {n + 1}"}
        turns = replies[cid]
        if len(turns) == 1 and turns[0]["role"] == "assistant":
            item["body"] = turns[0]["content"]
        else:
            item.update({"html": turns_html(turns), ITEM_TURNS: turns})
        items.append(item)
    system, dialogue = split_system(prompt)
    data = {"prompt": compact(prompt), "system": system, DIALOGUE: dialogue, "items": items, KEY_FIELD: key}
    if template == "pairwise":
        left, right = replies[order[0]], replies[order[1]]
        data["left"], data["right"] = reply_columns(left)["text"], reply_columns(right)["text"]
        data["left_html"], data["right_html"] = turns_html(left), turns_html(right)
    return data
