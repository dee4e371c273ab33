"""Pairs by id → Arrow tables of the texts an export writes, a batch at a time.

A batch of pairs arrives as ids (`id_schema()`); `text_tables` looks up the texts of
just its prompts and candidates and gathers them with Arrow's `take`, so memory
holds one batch, never the whole export, and no Python object is made per pair.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from preflab.db.export.arrow import rows_to_batch
from preflab.db.models import Annotator, Candidate, Prompt

# One row of pairs by id: (prompt_id, chosen_id, rejected_id, margin, weight, annotator_kind, annotator_id);
# annotator_id is None for an aggregate of several annotators.
PairRow = tuple[int, int, int, float, float, str, int | None]


def features(conversational: bool):
    import pyarrow as pa

    message = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    text = message if conversational else pa.string()
    return pa.schema([
        ("prompt", text), ("chosen", text), ("rejected", text), ("margin", pa.float64()),
        ("prompt_id", pa.int64()), ("weight", pa.float64()), ("annotator_kind", pa.string()),
        ("annotator", pa.string()),
    ])


def _as_messages(texts, role: str):
    """A column of strings as one-message chat lists, without leaving Arrow."""
    import numpy as np
    import pyarrow as pa

    roles = pa.array(np.full(len(texts), role, dtype=object), pa.string())
    messages = pa.StructArray.from_arrays([roles, texts], names=["role", "content"])
    return pa.ListArray.from_arrays(pa.array(np.arange(len(texts) + 1, dtype=np.int32)), messages)


def id_schema():
    import pyarrow as pa

    return pa.schema([("prompt_id", pa.int64()), ("chosen_id", pa.int64()), ("rejected_id", pa.int64()),
                      ("margin", pa.float64()), ("weight", pa.float64()), ("annotator_kind", pa.string()),
                      ("annotator_id", pa.int64())])


def id_batches(rows: Iterable[Sequence[PairRow]]) -> Iterator:
    """`PairRow` batches as Arrow record batches of `id_schema()`."""
    schema = id_schema()
    for batch in rows:
        if batch:
            yield rows_to_batch(batch, schema)


def text_tables(session: Session, batches: Iterable, splits: dict[int, str], conversational: bool):
    """Yield (split, Arrow table, identity bytes) for each record batch of ids (`id_schema()`).

    The texts of just the prompts and candidates in a batch are looked up and
    gathered with Arrow's `take`, so memory holds one batch, never the whole
    export. The identity bytes (content hashes, not database ids) feed the
    dataset version's content hash.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from preflab.db.bulk import lookup

    annotators = session.execute(select(Annotator.id, Annotator.pseudonym)).all()
    annotator_ids = pa.array([a for a, _ in annotators], pa.int64())
    annotator_names = pa.array([n for _, n in annotators], pa.string())
    test_ids = pa.array([p for p, split in splits.items() if split == "test"], pa.int64())
    schema = features(conversational)
    for batch in batches:
        if not batch.num_rows:
            continue
        prompt_ids, chosen, rejected, margin, weight, kind, annotator = batch.columns
        prompts = lookup(session, Prompt.__table__, ("id", "text", "content_hash"), "id",
                         pc.unique(prompt_ids).to_pylist())
        candidates = lookup(session, Candidate.__table__, ("id", "text", "content_hash"), "id",
                            pc.unique(pa.concat_arrays([chosen, rejected])).to_pylist())
        # ids → positions in the looked-up rows, in Arrow's C++ (no Python loop per pair)
        prompt_idx = pc.index_in(prompt_ids, value_set=pa.array([p[0] for p in prompts], pa.int64()))
        cand_ids = pa.array([c[0] for c in candidates], pa.int64())
        chosen_idx = pc.index_in(chosen, value_set=cand_ids)
        rejected_idx = pc.index_in(rejected, value_set=cand_ids)
        cand_text = pa.array([c[1] for c in candidates], pa.string())
        cand_hash = pa.array([c[2] for c in candidates], pa.string())
        public = pc.fill_null(annotator_names.take(pc.index_in(annotator, value_set=annotator_ids)), "aggregate")
        columns = {
            "prompt": pa.array([p[1] for p in prompts], pa.string()).take(prompt_idx),
            "chosen": cand_text.take(chosen_idx), "rejected": cand_text.take(rejected_idx),
            "margin": margin, "prompt_id": prompt_ids, "weight": weight, "annotator_kind": kind,
            "annotator": public,
        }
        identity = pa.table({
            "prompt": pa.array([p[2] for p in prompts], pa.string()).take(prompt_idx),
            "chosen": cand_hash.take(chosen_idx), "rejected": cand_hash.take(rejected_idx),
            "margin": margin, "weight": weight, "kind": kind, "annotator": public})
        if conversational:
            columns["prompt"] = _as_messages(columns["prompt"], "user")
            columns["chosen"] = _as_messages(columns["chosen"], "assistant")
            columns["rejected"] = _as_messages(columns["rejected"], "assistant")
        table = pa.table(columns, schema=schema)
        is_test = pc.is_in(prompt_ids, value_set=test_ids)
        for split, mask in (("train", pc.invert(is_test)), ("test", is_test)):
            part = table.filter(mask)
            if part.num_rows:
                yield split, part, _ipc_bytes(identity.filter(mask))


def _ipc_bytes(table) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()
