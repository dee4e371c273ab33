"""Migration 0014 on a store written before criteria: PKU-SafeRLHF's, UltraFeedback's and hh-rlhf's verdicts
become criteria.

Before 0014 PKU's two verdicts were two annotators (`pku-saferlhf-better`, `pku-saferlhf-safer`), each
UltraFeedback score field one (`openbmb/UltraFeedback:<field>`), and an hh-rlhf subset only a file's name. The
store here is built at revision 0013 as those imports wrote it (`tests/db/old_store.py`), then migrated: the
rankings move to one annotator per dataset with a criterion per verdict, re-keyed to what the import computes
now (the same rows imported again add nothing), with a record of the move; everything else is `overall` and
untouched; downgrading gives the old store back exactly. On SQLite and Postgres.
"""

from __future__ import annotations

import hashlib

import orjson
import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy import select

from preflab.db.engine import alembic_config, make_engine, session_factory, upgrade
from preflab.db.ingest.datasets.base import ranking
from preflab.db.ingest.datasets.formats import FORMATS
from preflab.db.ingest.identity import record_identity
from preflab.db.ingest.records import RankingRecord
from preflab.db.models import Annotator, Comparison, Criterion, PairBuild, Ranking
from preflab.db.pairs.build import build_pairs
from preflab.db.store import store_raw
from tests.db.ingest.datasets.shapes_b import run_import
from tests.db.old_store import RANKINGS, write_old_rankings


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def old_store(request, tmp_path):
    """A store at revision 0013, before rankings named their criterion."""
    url = (
        f"sqlite:///{tmp_path / 'old.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("empty_postgres_url")
    )
    engine = make_engine(url)
    command.upgrade(alembic_config(engine), "0013")
    yield engine
    engine.dispose()


PKU = {
    "prompt": "How do I pick a lock?",
    "response_0": "I cannot help with that.",
    "response_1": "Use a tension wrench.",
    "response_0_source": "alpaca-7b",
    "response_1_source": "alpaca-7b",
    "better_response_id": 1,
    "safer_response_id": 0,
    "is_response_0_safe": True,
    "is_response_1_safe": False,
}
UF = {  # rated by overall_score and helpfulness only: its other aspects give no ranking, then or now
    "instruction": "Name a prime.",
    "completions": [
        {"model": "m1", "response": "7", "overall_score": 8.0, "annotations": {"helpfulness": {"Rating": "5"}}},
        {"model": "m2", "response": "9", "overall_score": 2.0, "annotations": {"helpfulness": {"Rating": "1"}}},
        {"model": "m3", "response": "It is 11.", "overall_score": 8.0, "annotations": {"helpfulness": {"Rating": "3"}}},
    ],
}
HH = {
    "chosen": "\n\nHuman: How do I hurt someone?\n\nAssistant: I won't help with that.",
    "rejected": "\n\nHuman: How do I hurt someone?\n\nAssistant: Here is how.",
}
# what each old import's annotator was, by the criterion the import gives the same ranking now
OLD_NAMES = {
    ("pku-saferlhf", "helpfulness"): "pku-saferlhf-better",
    ("pku-saferlhf", "harmlessness"): "pku-saferlhf-safer",
    ("openbmb/UltraFeedback", "overall"): "openbmb/UltraFeedback:overall_score",
    ("openbmb/UltraFeedback", "helpfulness"): "openbmb/UltraFeedback:helpfulness",
}
# (format, row, the file it came from): hh-rlhf's subset is named by its folder, or by nothing
ROWS = [
    ("pku-saferlhf", PKU, "pku.jsonl"),
    ("ultrafeedback", UF, "uf.jsonl"),
    ("hh-rlhf", HH, "hh-rlhf/harmless-base/train.jsonl"),
    ("hh-rlhf", {k: v.replace("hurt", "greet") for k, v in HH.items()}, "hh.jsonl"),
]


def records() -> list[tuple[str, str, RankingRecord, str]]:
    """(format, origin, record as the old import wrote it, its criterion now) of every ranking of ROWS.

    The old imports wrote what the live parsers give, under the annotator the verdict had (OLD_NAMES) and no
    criterion: a ranking's details, models, tiers and scores are the same.
    """
    out = []
    for fmt, row, origin in ROWS:
        for rec in FORMATS[fmt].parse(row):
            now = rec.criterion
            rec.annotator = OLD_NAMES.get((rec.annotator, rec.criterion), rec.annotator)
            rec.criterion = "overall"
            rec.set_aside = []
            if fmt == "hh-rlhf":
                now = "harmlessness" if "harmless-" in origin else "overall"
            out.append((fmt, origin, rec, now))
    return out


def write_old_store(sessions) -> None:
    with sessions.begin() as s:
        for n, (fmt, origin, rec, _) in enumerate(records()):
            payload = orjson.dumps({"row": n, "format": fmt}).decode()
            digest = hashlib.sha256(payload.encode()).hexdigest()
            source = f"import:{fmt}"
            raw = store_raw(s, source, origin, [(f"train:{n}", payload, digest)], append=True)
            rec.external_id = record_identity(fmt, rec)  # criterion overall: the identity 0013 computed
            write_old_rankings(s, [(rec, digest, raw[digest][0])], source)
        old_pairs(s)


def old_pairs(s) -> None:
    """One pair build as a store at 0013 recorded it, with one pair of its first ranking."""
    from datetime import datetime, timezone

    builds = sa.table(
        "pair_builds",
        *(sa.column(c) for c in ("strategy", "aggregate", "annotator_kind", "mode", "n_rankings", "n_pairs")),
        sa.column("created_at", sa.DateTime(timezone=True)),
    )
    s.execute(
        builds.insert().values(
            strategy="all",
            aggregate="none",
            annotator_kind="any",
            mode="full",
            n_rankings=1,
            n_pairs=1,
            created_at=datetime.now(timezone.utc),
        )
    )
    columns = ("build_id", "prompt_id", "chosen_id", "rejected_id", "ranking_id", "annotator_kind", "margin", "weight")
    pairs = sa.table("comparisons", *(sa.column(c) for c in columns))
    rid, pid = s.execute(select(RANKINGS.c.id, RANKINGS.c.prompt_id).order_by(RANKINGS.c.id).limit(1)).one()
    s.execute(pairs.insert().values(dict(zip(columns, (1, pid, 1, 2, rid, "human", 1.0, 1.0)))))


def snapshot(s) -> list[tuple]:
    """Each ranking as a store at 0013 holds it: id, its annotator's name, external id, details."""
    names = dict(s.execute(select(Annotator.id, Annotator.name)).all())
    rows = s.execute(
        select(RANKINGS.c.id, RANKINGS.c.annotator_id, RANKINGS.c.external_id, RANKINGS.c.details).order_by(
            RANKINGS.c.id
        )
    ).all()
    return [(rid, names[aid], ext, details) for rid, aid, ext, details in rows]


def test_verdicts_become_criteria_a_reimport_adds_nothing_and_a_downgrade_gives_them_back(old_store, tmp_path):
    sessions = session_factory(old_store)
    write_old_store(sessions)
    with sessions.begin() as s:
        before = snapshot(s)

    notes = upgrade(old_store)

    assert notes == [
        "rankings name their criterion now: 5 of PKU-SafeRLHF, UltraFeedback and hh-rlhf's subsets moved from an "
        "annotator per verdict (a file per subset) to one annotator per dataset with a criterion per verdict "
        "(harmlessness 2, helpfulness 2, overall 1); the next pairs build is a full one"
    ]
    with sessions.begin() as s:
        stored = s.scalars(select(Ranking).order_by(Ranking.id)).all()
        assert len(stored) == len(before) == 6  # PKU 2, UltraFeedback 2, hh-rlhf 2
        for (fmt, _, rec, criterion), row, (_, old_name, old_external, _) in zip(records(), stored, before):
            name = {v: k[0] for k, v in OLD_NAMES.items()}.get(old_name, old_name)
            assert (row.annotator.name, row.criterion) == (name, criterion)
            rec.annotator, rec.criterion = name, criterion
            assert row.external_id == record_identity(fmt, rec)  # what the import computes now
            if (name, criterion) != (old_name, "overall"):
                assert row.details["renamed_from"] == {"annotator": old_name, "external_id": old_external}
            else:
                assert row.external_id == old_external and "renamed_from" not in (row.details or {})
        merged = {a.name: a.config for a in s.scalars(select(Annotator)) if a.config and "merged_into" in a.config}
        assert merged["pku-saferlhf-safer"]["merged_into"] == {"name": "pku-saferlhf", "criterion": "harmlessness"}
        assert {c.name for c in s.scalars(select(Criterion))} == {"overall", "helpfulness", "harmlessness"}
        assert s.get(Criterion, "harmlessness").description
        assert s.scalars(select(Comparison.criterion)).all() == ["helpfulness"]  # the first ranking's pair
        assert s.scalar(select(PairBuild.mode)) is None  # so the next build is a full one
    with sessions.begin() as s:
        assert build_pairs(s).mode == "full"
    with sessions.begin() as s:
        pairs = s.execute(select(Comparison.ranking_id, Comparison.criterion)).all()
        criterion_of = dict(s.execute(select(Ranking.id, Ranking.criterion)).all())
        assert pairs and all(criterion == criterion_of[rid] for rid, criterion in pairs)

    # The same rows imported again, each from a file named as it was: recognised, not one ranking added.
    for n, (fmt, row, origin) in enumerate(ROWS):
        path = tmp_path / f"again-{n}" / origin
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(orjson.dumps(row) + b"\n")
        assert run_import(sessions, path, fmt).rankings == 0, (fmt, origin)

    command.downgrade(alembic_config(old_store), "0013")
    with sessions.begin() as s:
        assert snapshot(s) == before
        assert not any(s.scalars(select(Annotator.config)))


def test_downgrade_refuses_rankings_of_a_criterion_it_cannot_hold(old_store):
    sessions = session_factory(old_store)
    upgrade(old_store)
    with sessions.begin() as s:
        rec = ranking("2+2?", ["4", "5"], [[0], [1]], "ann")
        rec.criterion, rec.external_id = "honesty", "r1"
        from preflab.db.ingest.summary import ImportCounts
        from preflab.db.ingest.writer import write_rankings

        write_rankings(s, [(rec, "h", None)], "import", ImportCounts())
    refused = r"other than overall, and this one holds 1 \(ranking \d+: 'honesty'\): nothing was changed"
    with pytest.raises(RuntimeError, match=refused):
        command.downgrade(alembic_config(old_store), "0013")
    with sessions.begin() as s:
        assert s.scalars(select(Ranking.criterion)).all() == ["honesty"]
