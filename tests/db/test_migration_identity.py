"""Migration 0013 on a store the old import wrote: the same rows in other encodings, stored as duplicates.

Before 0013 a row without an id of its own was keyed by the SHA-256 of its bytes, so one binarized row
written with `json.dumps` and again compactly was two rankings. The store here is built at revision 0012
the way that import wrote it (raw record first, then the ranking keyed by the payload's hash), then
migrated: the duplicates are retired (none deleted, nor any raw record), the rankings kept are re-keyed to
what they mean, a re-import in any encoding adds nothing, and the next pairs build drops the retired
rankings' pairs. On SQLite and Postgres.
"""

from __future__ import annotations

import hashlib
import json

import orjson
import pytest
from alembic import command
from sqlalchemy import func, select, update

from preflab.db.engine import alembic_config, make_engine, session_factory, upgrade
from preflab.db.ingest.datasets.formats import FORMATS
from preflab.db.ingest.jsonl import import_file, import_rankings_batch, parse_ranking
from preflab.db.models import Comparison, Ranking, RankingItem, RawRecord
from preflab.db.pairs.build import build_pairs
from preflab.db.store import store_raw
from tests.db.ingest.datasets.shapes_b import run_import, write_parquet
from tests.db.old_store import write_old_rankings


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def old_url(request, tmp_path):
    """A store at revision 0012, before rankings were identified by what they mean: its URL."""
    url = (
        f"sqlite:///{tmp_path / 'old.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("empty_postgres_url")
    )
    engine = make_engine(url)
    command.upgrade(alembic_config(engine), "0012")
    engine.dispose()
    return url


@pytest.fixture
def old_store(old_url):
    engine = make_engine(old_url)
    yield engine
    engine.dispose()


def binarized(prompt, chosen, rejected, scores, prompt_id=None):
    row = {
        "prompt": prompt,
        "chosen": [{"role": "user", "content": prompt}, {"role": "assistant", "content": chosen}],
        "rejected": [{"role": "user", "content": prompt}, {"role": "assistant", "content": rejected}],
        "score_chosen": scores[0],
        "score_rejected": scores[1],
    }
    return row | ({"prompt_id": prompt_id} if prompt_id else {})


TRL = [
    binarized("Name a prime.", "7", "9", (9.0, 2.0), prompt_id="ab12"),
    binarized("Say hi.", "Hi!", "Go away.", (7.0, 7.0)),
]
NECTAR = {
    "prompt": "\n\nHuman: A word that rhymes with cat.\n\nAssistant: ",
    "answers": [{"answer": "Hat.", "model": "gpt-4", "rank": 1.0}, {"answer": "Dog.", "model": "llama", "rank": 2.0}],
}
ARENA = json.loads(FORMATS["arena"].example)
RANKING = {"prompt": "2+2?", "responses": ["4", "5"], "ranking": [[0], [1]], "annotator": "ann", "scores": [7.0, 1.5]}


def encodings(row: dict) -> list[bytes]:
    """One row as three files would hold it: json.dumps, compact with other key order, 7 against 7.0."""
    whole = json.dumps(row, separators=(",", ":"), sort_keys=True).replace(".0,", ",").replace(".0}", "}")
    return [
        json.dumps(row).encode(),
        json.dumps(dict(reversed(row.items())), separators=(",", ":")).encode(),
        whole.encode(),
    ]


def old_import(session, fmt: str, payloads: list[bytes]) -> None:
    """What `import dataset` wrote before 0013: the raw row, then its rankings keyed by the row's hash."""
    source = f"import:{fmt}"
    for n, payload in enumerate(payloads):
        digest = hashlib.sha256(payload).hexdigest()
        raw = store_raw(session, source, "old.jsonl", [(f"train:{n}", payload.decode(), digest)], append=True)
        records = FORMATS[fmt].parse(orjson.loads(payload))
        for record in records:
            record.external_id = digest if fmt == "trl" or record.external_id is None else record.external_id
            record.source = source
        write_old_rankings(session, [(r, digest, raw[digest][0]) for r in records], source)


def old_rankings(session, lines: list[bytes]) -> None:
    """What `import rankings` wrote before 0013: a ranking without an `id` keyed by its line's hash."""
    for n, line in enumerate(lines):
        digest = hashlib.sha256(line).hexdigest()
        raw = store_raw(session, "import:rankings", "old.jsonl", [(str(n), line.decode(), digest)], append=True)
        record = parse_ranking(line)
        record.external_id = record.external_id or digest
        write_old_rankings(session, [(record, digest, raw[digest][0])], "import")


def counts(session) -> dict[str, int]:
    return dict(session.execute(select(Ranking.status, func.count()).group_by(Ranking.status)).all())


def test_old_duplicates_are_retired_and_a_reimport_is_recognised(old_store, tmp_path):
    sessions = session_factory(old_store)
    with sessions.begin() as s:
        old_import(s, "trl", [e for row in TRL for e in encodings(row)])  # 2 rows, 3 encodings each
        old_import(s, "nectar", encodings(NECTAR))
        old_import(s, "arena", encodings(ARENA))  # keyed by its question_id already: one ranking
        old_rankings(s, encodings(RANKING))
        # a ranking written before 0011 names no model on its items: the candidates' are taken
        nectar = s.scalars(select(Ranking.id).where(Ranking.source == "import:nectar")).all()
        s.execute(update(RankingItem).where(RankingItem.ranking_id.in_(nectar)).values(model=None))
    with sessions.begin() as s:
        assert counts(s) == {"valid": 13}
        raw_before = s.scalar(select(func.count()).select_from(RawRecord))

    notes = upgrade(old_store)

    assert notes == [
        "imported rankings are identified by what they mean now: 8 duplicate rankings retired "
        "(status duplicate, their raw records kept), 4 re-keyed"
    ]
    with sessions.begin() as s:
        assert counts(s) == {"valid": 5, "duplicate": 8}
        assert s.scalar(select(func.count()).select_from(RawRecord)) == raw_before
        kept = {r.id: r for r in s.scalars(select(Ranking).where(Ranking.status == "valid"))}
        for retired in s.scalars(select(Ranking).where(Ranking.status == "duplicate")):
            assert retired.details["duplicate_of"] in kept
            assert kept[retired.details["duplicate_of"]].prompt_id == retired.prompt_id
        assert any(r.external_id.startswith("ab12:") for r in kept.values())  # the binarized prompt_id, with its pair
    with sessions.begin() as s:  # (pairs are built after the migration: the live build writes a pair's criterion)
        build_pairs(s)
    with sessions.begin() as s:
        assert s.scalar(select(func.count()).select_from(Comparison)) == 1 + 1 + 1 + 1  # the tie gives none
        assert not s.scalar(select(func.count()).where(Ranking.status == "duplicate", Ranking.in_pairs))

    # The same rows again, in every encoding and as Parquet: recognised, nothing added.
    for fmt, rows in (("trl", TRL), ("nectar", [NECTAR]), ("arena", [ARENA])):
        for n, payloads in enumerate(zip(*(encodings(row) for row in rows))):
            path = tmp_path / f"{fmt}-{n}.jsonl"
            path.write_bytes(b"\n".join(payloads) + b"\n")
            assert run_import(sessions, path, fmt).rankings == 0
        assert run_import(sessions, write_parquet(tmp_path / f"{fmt}.parquet", rows), fmt).rankings == 0
    lines = tmp_path / "rankings.jsonl"
    lines.write_bytes(b"\n".join(encodings(RANKING)) + b"\n")
    assert import_file(sessions, lines, import_rankings_batch).imported == 0
    with sessions.begin() as s:
        assert counts(s) == {"valid": 5, "duplicate": 8}

    command.downgrade(alembic_config(old_store), "0012")  # the retired rankings are valid again
    with sessions.begin() as s:
        assert counts(s) == {"valid": 13}
        assert not any("duplicate_of" in (d or {}) for d in s.scalars(select(Ranking.details)))


def test_a_store_without_duplicates_is_left_as_it_is(old_store):
    sessions = session_factory(old_store)
    with sessions.begin() as s:
        old_import(s, "arena", encodings(ARENA)[:1])
    assert upgrade(old_store) == []
    with sessions.begin() as s:
        assert s.scalars(select(Ranking.external_id)).all() == ["q1"]


def test_db_upgrade_says_what_it_retired(old_store, old_url):
    from click.testing import CliRunner

    from preflab.cli import cli

    sessions = session_factory(old_store)
    with sessions.begin() as s:
        old_import(s, "trl", encodings(TRL[1]))
    result = CliRunner().invoke(cli, ["--database-url", old_url, "db", "upgrade"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == (
        "imported rankings are identified by what they mean now: 2 duplicate rankings retired "
        "(status duplicate, their raw records kept), 1 re-keyed"
    )
    assert result.output.splitlines()[-1].endswith("is at revision 0014")
