"""Pairs by id → Arrow tables of the texts an export writes, a batch at a time.

A batch of pairs arrives as ids (`id_schema()`); `text_tables` looks up the texts of
just its prompts and candidates and gathers them with Arrow's `take`, so memory
holds one batch, never the whole export, and no Python object is made per pair.

The texts take one of three forms (`TextForm`): chat messages, as TRL's
conversational format expects (a prompt is its history, a reply its turns: stored
as `preflab.db.conversation` keeps them); plain text, which holds only a prompt of
one user message and a reply of one assistant message; or plain text rendered with
a tokenizer's chat template (any object with `apply_chat_template`: the caller
loads it, this floor imports no model code). Each form comes with an explicit
prompt (a `prompt` column) or an implicit one (inside `chosen` and `rejected`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import exists, func, select
from sqlalchemy.orm import Session

from preflab.db.bulk import IN_CHUNK, in_values
from preflab.db.conversation import assistant_turn, stored_prompt, stored_reply, user_turn
from preflab.db.export.arrow import rows_to_batch
from preflab.db.export.digest import hash_words, pair_words
from preflab.db.export.selection import kept_comparisons, kept_prompts
from preflab.db.models import Annotator, Candidate, Comparison, Prompt
from preflab.errors import InputError

# One row of pairs by id: (prompt_id, chosen_id, rejected_id, margin, weight, annotator_kind, annotator_id);
# annotator_id is None for an aggregate of several annotators.
PairRow = tuple[int, int, int, float, float, str, int | None]

NEEDS_MESSAGES = (
    "{n} of the prompts and replies to export are conversations of several messages, which plain "
    "text cannot hold: export them with --conversational (the default), or render them as text "
    "with --chat-template MODEL"
)


@dataclass(frozen=True)
class TextForm:
    """How an export writes its texts: messages or plain text, and where the prompt is."""

    conversational: bool = True
    explicit: bool = True  # a `prompt` column; else the prompt opens `chosen` and `rejected`
    tokenizer: Any = None  # plain text rendered with its chat template (`apply_chat_template`)


def features(conversational: bool, explicit: bool = True):
    import pyarrow as pa

    text = _message_list() if conversational else pa.string()
    return pa.schema(
        [
            *([("prompt", text)] if explicit else []),
            ("chosen", text),
            ("rejected", text),
            ("margin", pa.float64()),
            ("prompt_id", pa.int64()),
            ("weight", pa.float64()),
            ("annotator_kind", pa.string()),
            ("annotator", pa.string()),
        ]
    )


def _message_list():
    import pyarrow as pa

    return pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))


def _as_messages(texts, role: str):
    """A column of strings as one-message chat lists, without leaving Arrow."""
    import numpy as np
    import pyarrow as pa

    roles = pa.array(np.full(len(texts), role, dtype=object), pa.string())
    messages = pa.StructArray.from_arrays([roles, texts], names=["role", "content"])
    return pa.ListArray.from_arrays(pa.array(np.arange(len(texts) + 1, dtype=np.int32)), messages)


def _joined(first, second):
    """Row by row, the messages of `first` followed by those of `second` (list arrays of one length), in Arrow."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    a_len = pc.list_value_length(first).to_numpy(zero_copy_only=False).astype(np.int64)
    b_len = pc.list_value_length(second).to_numpy(zero_copy_only=False).astype(np.int64)
    a_values, b_values = first.flatten(), second.flatten()
    a_start, b_start = np.cumsum(a_len) - a_len, np.cumsum(b_len) - b_len
    offsets = np.concatenate([[0], np.cumsum(a_len + b_len)])
    row = np.repeat(np.arange(len(a_len)), a_len + b_len)
    at = np.arange(offsets[-1]) - offsets[row]  # position inside its row
    take = np.where(at < a_len[row], a_start[row] + at, len(a_values) + b_start[row] + at - a_len[row])
    values = pa.concat_arrays([a_values, b_values]).take(pa.array(take, pa.int64()))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)


def rendered(tokenizer, prompt: Sequence[dict], reply: Sequence[dict]) -> tuple[str, str, str]:
    """(prompt, reply, whole) as text in the tokenizer's chat template.

    The prompt ends with the template's generation prompt; the reply is what the whole
    conversation adds to it (from where the two differ, if the template renders the
    prompt alone differently, as TRL splits them).
    """
    head = tokenizer.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True)
    whole = tokenizer.apply_chat_template(list(prompt) + list(reply), tokenize=False)
    n = 0
    if whole.startswith(head):
        n = len(head)
    else:
        while n < min(len(head), len(whole)) and head[n] == whole[n]:
            n += 1
    return head, whole[n:], whole


def id_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("prompt_id", pa.int64()),
            ("chosen_id", pa.int64()),
            ("rejected_id", pa.int64()),
            ("margin", pa.float64()),
            ("weight", pa.float64()),
            ("annotator_kind", pa.string()),
            ("annotator_id", pa.int64()),
        ]
    )


def id_batches(rows: Iterable[Sequence[PairRow]]) -> Iterator:
    """`PairRow` batches as Arrow record batches of `id_schema()`."""
    schema = id_schema()
    for batch in rows:
        if batch:
            yield rows_to_batch(batch, schema)


def holds_conversations(session: Session) -> bool:
    """Whether any prompt or candidate is stored with its messages (more than one plain message)."""
    return bool(
        session.scalar(select(exists().where(Prompt.messages.is_not(None))))
        or session.scalar(select(exists().where(Candidate.messages.is_not(None))))
    )


def refuse_plain_conversations(session: Session, annotators: str, criteria: Sequence[str] = ()) -> None:
    """Stop, before anything is written, when an export of `annotators` (and `criteria`: empty, all) as plain text
    holds a conversation."""
    if not holds_conversations(session):
        return
    keep = kept_comparisons(annotators, criteria)
    kept = select(Comparison.chosen_id).where(keep).union(select(Comparison.rejected_id).where(keep))
    n = session.scalar(
        select(func.count())
        .select_from(Prompt)
        .where(Prompt.id.in_(kept_prompts(annotators, criteria)), Prompt.messages.is_not(None))
    ) + session.scalar(
        select(func.count()).select_from(Candidate).where(Candidate.id.in_(kept), Candidate.messages.is_not(None))
    )
    if n:
        raise InputError(NEEDS_MESSAGES.format(n=f"{n:,}"))


def _stored_messages(session: Session, column, ids: list[int]) -> dict[int, list]:
    """id → stored messages, for the rows of `ids` that have them (the others are plain text)."""
    table = column.table
    query = select(table.c.id, column).where(in_values(session, table.c.id), column.is_not(None))
    out: dict[int, list] = {}
    for start in range(0, len(ids), IN_CHUNK):
        out.update((i, m) for i, m in session.execute(query, {"values": ids[start : start + IN_CHUNK]}) if m)
    return out


def text_tables(session: Session, batches: Iterable, splits: dict[int, str], form: TextForm):
    """Yield (split, Arrow table, its pairs' `digest.pair_words`) for each record batch of ids (`id_schema()`).

    The texts of just the prompts and candidates in a batch are looked up and
    gathered with Arrow's `take`, so memory holds one batch, never the whole
    export. The words (of content hashes, not database ids) feed the
    dataset version's content hash (`preflab.db.export.digest`).

    Raises:
        InputError: plain text without a chat template, and a prompt or reply of several messages.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from preflab.db.bulk import lookup

    annotators = session.execute(select(Annotator.id, Annotator.pseudonym)).all()
    annotator_ids = pa.array([a for a, _ in annotators], pa.int64())
    annotator_names = pa.array([n for _, n in annotators], pa.string())
    test_ids = pa.array([p for p, split in splits.items() if split == "test"], pa.int64())
    schema = features(form.conversational, form.explicit)
    conversations = holds_conversations(session)
    for batch in batches:
        if not batch.num_rows:
            continue
        prompt_ids, chosen, rejected, margin, weight, kind, annotator = batch.columns
        prompts = lookup(
            session, Prompt.__table__, ("id", "text", "content_hash"), "id", pc.unique(prompt_ids).to_pylist()
        )
        candidates = lookup(
            session,
            Candidate.__table__,
            ("id", "text", "content_hash", "prompt_id"),
            "id",
            pc.unique(pa.concat_arrays([chosen, rejected])).to_pylist(),
        )
        turns = (
            {
                "prompts": _stored_messages(session, Prompt.messages, [p[0] for p in prompts]),
                "candidates": _stored_messages(session, Candidate.messages, [c[0] for c in candidates]),
            }
            if conversations
            else {"prompts": {}, "candidates": {}}
        )
        # ids → positions in the looked-up rows, in Arrow's C++ (no Python loop per pair)
        prompt_idx = pc.index_in(prompt_ids, value_set=pa.array([p[0] for p in prompts], pa.int64()))
        cand_ids = pa.array([c[0] for c in candidates], pa.int64())
        chosen_idx = pc.index_in(chosen, value_set=cand_ids)
        rejected_idx = pc.index_in(rejected, value_set=cand_ids)
        cand_hash = hash_words([c[2] for c in candidates])
        public = pc.fill_null(annotator_names.take(pc.index_in(annotator, value_set=annotator_ids)), "aggregate")
        prompt_texts, reply_texts = _unique_texts(form, prompts, candidates, turns)
        columns = {
            "prompt": prompt_texts.take(prompt_idx),
            "chosen": reply_texts.take(chosen_idx),
            "rejected": reply_texts.take(rejected_idx),
        }
        if not form.explicit and form.conversational:  # TRL's implicit prompt: whole conversations
            columns = {side: _joined(columns["prompt"], columns[side]) for side in ("chosen", "rejected")}
        columns |= {
            "margin": margin,
            "prompt_id": prompt_ids,
            "weight": weight,
            "annotator_kind": kind,
            "annotator": public,
        }
        words = pair_words(
            hash_words([p[2] for p in prompts])[prompt_idx.to_numpy(zero_copy_only=False)],
            cand_hash[chosen_idx.to_numpy(zero_copy_only=False)],
            cand_hash[rejected_idx.to_numpy(zero_copy_only=False)],
            margin,
            weight,
            kind,
            public,
        )
        table = pa.table({name: columns[name] for name in schema.names}, schema=schema)
        is_test = pc.is_in(prompt_ids, value_set=test_ids)
        for split, mask in (("train", pc.invert(is_test)), ("test", is_test)):
            part = table.filter(mask)
            if part.num_rows:
                yield split, part, words[mask.to_numpy(zero_copy_only=False)]


def _unique_texts(form: TextForm, prompts: list[tuple], candidates: list[tuple], turns: dict):
    """The batch's prompts and candidates (in lookup order) in the export's form, as two Arrow arrays.

    Rendered with an implicit prompt, a candidate's text is its whole conversation.
    """
    import pyarrow as pa

    if form.tokenizer is not None:
        by_id = {p[0]: stored_prompt(p[1], turns["prompts"].get(p[0])) for p in prompts}
        heads = {pid: rendered(form.tokenizer, messages, [])[0] for pid, messages in by_id.items()}
        part = 1 if form.explicit else 2
        replies = [
            rendered(form.tokenizer, by_id[c[3]], stored_reply(c[1], turns["candidates"].get(c[0])))[part]
            for c in candidates
        ]
        return pa.array([heads[p[0]] for p in prompts], pa.string()), pa.array(replies, pa.string())
    if not form.conversational:
        if turns["prompts"] or turns["candidates"]:
            raise InputError(NEEDS_MESSAGES.format(n=f"{len(turns['prompts']) + len(turns['candidates']):,}"))
        return pa.array([p[1] for p in prompts], pa.string()), pa.array([c[1] for c in candidates], pa.string())
    if not (turns["prompts"] or turns["candidates"]):
        return (
            _as_messages(pa.array([p[1] for p in prompts], pa.string()), "user"),
            _as_messages(pa.array([c[1] for c in candidates], pa.string()), "assistant"),
        )
    kind = _message_list()
    return (
        pa.array([turns["prompts"].get(p[0]) or user_turn(p[1]) for p in prompts], kind),
        pa.array([turns["candidates"].get(c[0]) or assistant_turn(c[1]) for c in candidates], kind),
    )
