"""OpenAssistant/oasst2 messages: every ranked set of replies in a message tree is one ranking.

The rows are messages (`message_id`, `parent_id`, `message_tree_id`, `role` prompter or
assistant, `text`, `rank`, `deleted`, `review_result`, `lang`, ...), a tree's rows one
after another, as the released files hold them. The importer groups consecutive rows by
`message_tree_id` and hands each tree to `parse`, so memory holds one tree at a time.
The rankings are by people, OpenAssistant's volunteers (one human annotator, `OpenAssistant`:
the rows do not say which volunteer ranked).

Every parent with two or more ranked assistant replies that are neither deleted nor
failed review gives one ranking of them by `rank` (0 is best; equal ranks tie). The
prompt is the path from the tree's root to that parent, the prompter's messages as the
user's; a path through a deleted or failed-review message gives no ranking. The ranking
is identified by its parent's `message_id`, so a tree imported twice adds nothing.

A tree's rows must be together. Before importing, the importer reads every row's
`message_tree_id` (`formats.split_groups`): a tree whose rows come in more than one run
is quarantined whole, every run of it, naming the tree and asking for the file sorted by
`message_tree_id`. Parsed from the run holding its root, it would give rankings missing
the replies that come later, and an import of the sorted file could not complete them:
their ids would be taken. A group without the tree's root, or with a message whose parent
is not in it (a file holding part of a tree), is quarantined too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from preflab.console import plural
from preflab.db.ingest.datasets.base import Format, ranking
from preflab.db.ingest.records import RankingRecord, shown
from preflab.errors import Invalid

ANNOTATOR = "OpenAssistant"
ROLES = {"prompter": "user", "assistant": "assistant"}


def _removed(message: dict[str, Any]) -> bool:
    """Deleted, or failed review (a message still waiting for review has no `review_result`)."""
    return message.get("deleted") is True or message.get("review_result") is False


def _rank(message: dict[str, Any]) -> float | None:
    rank = message.get("rank")
    if isinstance(rank, bool) or not isinstance(rank, (int, float)) or rank != rank:  # NaN: pandas' missing value
        return None
    return float(rank)


def _messages(rows: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """The tree's messages by id; raises Invalid when the rows are not one whole tree."""
    by_id: dict[str, dict[str, Any]] = {}
    roots = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise Invalid(f"row {i} of the tree is {type(row).__name__}, not a message")
        mid = row.get("message_id")
        if not isinstance(mid, str) or not mid:
            raise Invalid(f"row {i} of the tree has no 'message_id'")
        if mid in by_id:
            raise Invalid(f"message {mid} appears twice in its tree")
        by_id[mid] = row
        if row.get("parent_id") is None:
            roots.append(mid)
    tree = rows[0].get("message_tree_id") if isinstance(rows[0], dict) else None
    apart = f"the rows of message tree {tree} are not together; sort the file by message_tree_id"
    if len(roots) != 1:
        raise Invalid(
            f"{apart} (no root message among its {plural(len(rows), 'row')})"
            if not roots
            else f"message tree {tree} has {len(roots)} root messages (messages without a parent_id)"
        )
    for mid, row in by_id.items():
        if row.get("parent_id") is not None and row["parent_id"] not in by_id:
            raise Invalid(f"{apart} (the parent of message {mid} is not among its {plural(len(rows), 'row')})")
    return by_id


def _path(by_id: dict[str, dict[str, Any]], parent: str) -> list[dict[str, Any]] | None:
    """The messages from the root to `parent`; None when one of them was deleted or failed review."""
    path = []
    mid: str | None = parent
    while mid is not None:
        message = by_id[mid]
        if _removed(message):
            return None
        path.append(message)
        if len(path) > len(by_id):
            raise Invalid(f"message {parent}'s parents form a loop")
        mid = message.get("parent_id")
    return path[::-1]


def _turn(message: dict[str, Any]) -> dict[str, Any]:
    role = message.get("role")
    if role not in ROLES:
        raise Invalid(f"message {message['message_id']} has role {shown(role)} (expected prompter or assistant)")
    return {"role": ROLES[role], "content": message.get("text")}


def parse(rows: Sequence[Any]) -> list[RankingRecord]:
    """Every ranking in one tree's rows, in file order; raises Invalid (the tree's rows are quarantined).

    A tree is quarantined whole when one of its rankings cannot be used (the reason names the
    parent), as an import quarantines a record: a ranking is never left out silently.
    """
    by_id = _messages(rows)
    replies: dict[str, list[dict[str, Any]]] = {}
    for message in by_id.values():
        if message.get("role") == "assistant" and _rank(message) is not None and not _removed(message):
            replies.setdefault(message.get("parent_id"), []).append(message)
    out = []
    for parent, ranked in replies.items():
        path = _path(by_id, parent) if len(ranked) >= 2 else None
        if path is None:
            continue
        ranks = [_rank(m) for m in ranked]
        tiers = [[i for i, r in enumerate(ranks) if r == value] for value in sorted(set(ranks))]
        models = [m.get("model_name") if isinstance(m.get("model_name"), str) else None for m in ranked]
        details: dict[str, Any] = {"message_ids": [m["message_id"] for m in ranked]}
        if isinstance(by_id[parent].get("lang"), str):
            details["lang"] = by_id[parent]["lang"]
        try:
            out.append(
                ranking(
                    [_turn(m) for m in path],
                    [[_turn(m)] for m in ranked],
                    tiers,
                    ANNOTATOR,
                    models=models,
                    details=details,
                    external_id=parent,
                    names=[f"message {m['message_id']}" for m in ranked],
                )
            )
        except Invalid as exc:
            raise Invalid(f"the replies to message {parent}: {exc}") from None
    return out


# A ranking spans rows: the example is a whole (tiny) tree, one message a line.
EXAMPLE = "\n".join(
    (
        '{"message_id": "m1", "parent_id": null, "message_tree_id": "m1", "role": "prompter", "text": "Capital of '
        'France?", "lang": "en", "rank": null, "deleted": false, "review_result": true}',
        '{"message_id": "m2", "parent_id": "m1", "message_tree_id": "m1", "role": "assistant", "text": "Paris.", '
        '"lang": "en", "rank": 0, "deleted": false, "review_result": true}',
        '{"message_id": "m3", "parent_id": "m1", "message_tree_id": "m1", "role": "assistant", "text": "Lyon.", '
        '"lang": "en", "rank": 1, "deleted": false, "review_result": true}',
    )
)

FORMAT = Format(
    name="oasst2",
    columns=frozenset({"message_id", "message_tree_id", "role", "text"}),
    parse=parse,
    group_by="message_tree_id",
    group_name="message tree",
    example=EXAMPLE,
    annotator=ANNOTATOR,
    kind="human",
    judged_by="OpenAssistant volunteers",
    texts=frozenset({"message_id", "parent_id", "message_tree_id", "role", "text", "lang", "model_name"}),
)
