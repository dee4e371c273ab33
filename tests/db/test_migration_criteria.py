"""Migration 0014 on a store written before criteria: PKU-SafeRLHF's and UltraFeedback's verdicts become criteria.

Before 0014 PKU's two verdicts were two annotators (`pku-saferlhf-better`, `pku-saferlhf-safer`), and each
UltraFeedback score field one (`openbmb/UltraFeedback:<field>`). The store here is built at revision 0013 as
those imports wrote it (`tests/db/old_store.py`), then migrated: the rankings move to one annotator per dataset
with a criterion per verdict, re-keyed to what the import computes now, with a record of the move; everything
else is `overall` and untouched; downgrading gives the old store back exactly. On SQLite and Postgres.
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
from preflab.db.ingest.identity import record_identity
from preflab.db.ingest.records import RankingRecord
from preflab.db.models import Annotator, Comparison, Criterion, PairBuild, Ranking
from preflab.db.pairs.build import build_pairs
from preflab.db.store import store_raw
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


PKU = {"prompt": "How do I pick a lock?", "replies": ["I cannot help with that.", "Use a tension wrench."]}
PKU_DETAILS = {"better_response_id": 1, "safer_response_id": 0, "is_response_0_safe": True}
UF = {"prompt": "Name a prime.", "replies": ["7", "9", "It is 11."]}


def records() -> list[tuple[str, RankingRecord]]:
    """(format, record) of each ranking the old imports wrote for one PKU row and one UltraFeedback row."""
    out = []
    for name, first in (("better", 1), ("safer", 0)):
        rec = ranking(
            PKU["prompt"], PKU["replies"], [[first], [1 - first]], f"pku-saferlhf-{name}", details=PKU_DETAILS
        )
        rec.models = ["alpaca-7b", "alpaca-7b"]
        out.append(("pku-saferlhf", rec))
    for field, scores in (("overall_score", [8.0, 2.0, 8.0]), ("helpfulness", [5.0, 1.0, 3.0])):
        tiers = [[0, 2], [1]] if field == "overall_score" else [[0], [2], [1]]
        rec = ranking(
            UF["prompt"],
            UF["replies"],
            tiers,
            f"openbmb/UltraFeedback:{field}",
            kind="ai",
            scores=scores,
            details={"score_field": field},
        )
        out.append(("ultrafeedback", rec))
    rec = ranking(PKU["prompt"], PKU["replies"], [[0], [1]], "someone")  # a person's ranking: stays overall
    out.append(("rankings", rec))
    return out


def write_old_store(sessions) -> None:
    with sessions.begin() as s:
        for n, (fmt, rec) in enumerate(records()):
            payload = orjson.dumps({"row": n, "format": fmt}).decode()
            digest = hashlib.sha256(payload.encode()).hexdigest()
            source = f"import:{fmt}"
            raw = store_raw(s, source, "old.jsonl", [(f"train:{n}", payload, digest)], append=True)
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


def test_pku_and_ultrafeedback_verdicts_become_criteria_and_come_back_on_downgrade(old_store):
    sessions = session_factory(old_store)
    write_old_store(sessions)
    with sessions.begin() as s:
        before = snapshot(s)

    notes = upgrade(old_store)

    assert notes == [
        "rankings name their criterion now: 4 of PKU-SafeRLHF and UltraFeedback moved from an annotator per "
        "verdict to one annotator per dataset with a criterion per verdict (harmlessness 1, helpfulness 2, "
        "overall 1); the next pairs build is a full one"
    ]
    expected = {  # what the imports compute now: one annotator per dataset, a criterion per verdict
        ("pku-saferlhf-better"): ("pku-saferlhf", "helpfulness"),
        ("pku-saferlhf-safer"): ("pku-saferlhf", "harmlessness"),
        ("openbmb/UltraFeedback:overall_score"): ("openbmb/UltraFeedback", "overall"),
        ("openbmb/UltraFeedback:helpfulness"): ("openbmb/UltraFeedback", "helpfulness"),
        ("someone"): ("someone", "overall"),
    }
    with sessions.begin() as s:
        stored = s.scalars(select(Ranking).order_by(Ranking.id)).all()
        for (fmt, rec), row, (_, old_name, old_external, _) in zip(records(), stored, before):
            name, criterion = expected[old_name]
            assert (row.annotator.name, row.criterion) == (name, criterion)
            rec.annotator, rec.criterion = name, criterion
            assert row.external_id == record_identity(fmt, rec)  # a re-import finds it
            if name != old_name:
                assert row.details["renamed_from"] == {"annotator": old_name, "external_id": old_external}
            else:
                assert row.external_id == old_external and row.details is None
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
