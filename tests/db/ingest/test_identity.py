"""A ranking's identity: the examples of issue 46 §1a, beside the laws of test_identity_laws.py."""

from __future__ import annotations

import json

from sqlalchemy import func, select

from preflab.db.ingest.datasets.formats import FORMATS
from preflab.db.ingest.identity import canonical_json, pair_identity
from preflab.db.ingest.jsonl import import_file, import_rankings_batch
from preflab.db.models import Ranking, RawRecord
from tests.db.helpers import ranking_line, write_lines
from tests.db.ingest.datasets.shapes_b import run_import, write_jsonl, write_parquet

BINARIZED = [{**json.loads(FORMATS["trl"].example), "prompt_id": i} for i in (None, "p7")]
BINARIZED[1]["chosen"][1]["content"] = "11"


def counted(sessions, table) -> int:
    with sessions.begin() as s:
        return s.scalar(select(func.count()).select_from(table))


def test_one_binarized_file_written_twice_is_two_rankings_not_four(sessions, tmp_path):
    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in BINARIZED))
    compact = tmp_path / "compact.jsonl"
    compact.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in BINARIZED))
    assert run_import(sessions, plain, "trl").rankings == 2
    again = run_import(sessions, compact, "trl")
    assert (again.rankings, again.duplicates) == (0, 2)
    assert run_import(sessions, write_parquet(tmp_path / "rows.parquet", BINARIZED), "trl").rankings == 0
    assert counted(sessions, Ranking) == 2
    # each row as received: the Parquet rows' JSON is byte for byte the compact lines', so stored once
    assert counted(sessions, RawRecord) == 4
    with sessions.begin() as s:
        ids = sorted(s.scalars(select(Ranking.external_id)))
    assert len(ids[0]) == 64 and ids[1].startswith("p7:")  # what it means; the binarized prompt_id with its pair


def test_identical_votes_are_one_ranking_unless_the_dataset_tells_them_apart(sessions, tmp_path):
    battle = json.loads(FORMATS["arena"].example)
    rows = [
        battle,
        {**battle, "judge": "arena_user_2"},  # another person's identical vote
        {**battle, "question_id": "q2"},  # another battle
        dict(reversed(battle.items())),  # the first again, its keys in another order
    ]
    assert run_import(sessions, write_jsonl(tmp_path / "arena.jsonl", rows), "arena").rankings == 3
    unnamed = [{k: v for k, v in battle.items() if k not in ("question_id", "judge")}] * 2
    summary = run_import(sessions, write_jsonl(tmp_path / "unnamed.jsonl", unnamed), "arena")
    assert (summary.rankings, summary.duplicates) == (1, 1)  # nothing tells the two apart


def test_json_lines_rankings_without_an_id_are_identified_by_what_they_mean(sessions, tmp_path):
    line = ranking_line("2+2?", ["4", "5"], [[0], [1]], scores=[7.0, 1.5], model=["a", "b"])
    same = json.dumps(dict(reversed(json.loads(line).items())), separators=(",", ":")).replace("7.0", "7")
    other = ranking_line("2+2?", ["4", "5"], [[0], [1]], annotator="bob", scores=[7.0, 1.5], model=["a", "b"])
    summary = import_file(sessions, write_lines(tmp_path / "r.jsonl", [line, same, other]), import_rankings_batch)
    assert (summary.imported, summary.duplicates) == (2, 1)
    flipped = ranking_line("2+2?", ["5", "4"], [[1], [0]], scores=[1.5, 7.0], model=["b", "a"])  # listed the other way
    assert import_file(sessions, write_lines(tmp_path / "f.jsonl", [flipped]), import_rankings_batch).imported == 0


def test_canonical_form():
    assert canonical_json({"b": 7.0, "a": [1.0, None, {"c": None, "d": 2.5}]}) == b'{"a":[1,null,{"d":2.5}],"b":7}'
    assert pair_identity("p1", "x", "y") != pair_identity("p1", "y", "x")
    assert pair_identity(7.0, "x", "y").startswith("7:") and pair_identity(None, "x", "y") is None
    assert pair_identity("p" * 190, "x", "y") is None  # too long for the column: identified by meaning instead


def test_a_csv_of_lists_reads_its_cells_as_json_and_refuses_pythons_repr(sessions, tmp_path):
    """A new user's binarized rows as CSV: chosen and rejected (lists of messages) written as JSON are the same two
    rankings as the JSON Lines; written by pandas (Python's repr) they were stored as text, the whole list a reply.
    Now each such row is quarantined, saying so."""
    import csv

    def written(path, cell) -> str:
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(BINARIZED[0]))
            writer.writeheader()
            writer.writerows({k: cell(v) if isinstance(v, list) else v for k, v in row.items()} for row in BINARIZED)
        return str(path)

    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in BINARIZED))
    assert run_import(sessions, plain, "trl").rankings == 2
    as_json = run_import(sessions, written(tmp_path / "json.csv", json.dumps), "trl")
    assert (as_json.rankings, as_json.duplicates, as_json.quarantined) == (0, 2, 0)
    as_repr = run_import(sessions, written(tmp_path / "repr.csv", repr), "trl")
    assert (as_repr.rankings, as_repr.quarantined) == (0, 2)
    with sessions.begin() as s:
        reasons = set(s.scalars(select(RawRecord.reason).where(RawRecord.status == "quarantined")))
    assert reasons == {
        "'chosen' holds a list written by Python's repr, not as JSON: write its cells as JSON, "
        "or the file as JSON Lines or Parquet"
    }
    assert counted(sessions, Ranking) == 2
