"""What was ranked and the pairs built from it: prompts, candidates, annotators, raw records, rankings, comparisons.

A ranking is stored twice over: `Ranking` holds who ranked what and where it came
from; `RankingItem` holds one row per candidate shown, with its tier (0 = best;
NULL = shown but not ranked) and the position it was shown in. Pairs are expanded
from `RankingItem` in SQL, so building millions of comparisons never leaves the
database.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from preflab.db.models.base import Base, _ts


class AnnotatorKind(str, enum.Enum):
    human = "human"
    ai = "ai"


class RankingStatus(str, enum.Enum):
    valid = "valid"  # yields pairs
    superseded = "superseded"  # replaced by a newer version of the same annotation
    deleted = "deleted"  # the annotation was deleted at the source
    skipped = "skipped"  # the annotator skipped the task: recorded, no pairs
    # an imported ranking stored again before imports were identified by meaning (migration 0013): no pairs,
    # `details["duplicate_of"]` names the ranking kept
    duplicate = "duplicate"


class RawStatus(str, enum.Enum):
    ok = "ok"
    quarantined = "quarantined"
    pending = "pending"  # stored, not parsed yet (a webhook delivery acknowledged before parsing)


class Prompt(Base):
    __tablename__ = "prompts"

    id: Mapped[int] = mapped_column(primary_key=True)
    # NULL for one user message; else the conversation, and `text` its last user turn (db/conversation.py).
    text: Mapped[str] = mapped_column(Text)
    messages: Mapped[list[Any] | None] = mapped_column(JSON(none_as_null=True))
    content_hash: Mapped[str] = mapped_column(String(64), unique=True)
    source: Mapped[str | None] = mapped_column(String(200))
    reference: Mapped[str | None] = mapped_column(Text)
    split: Mapped[str | None] = mapped_column(String(10))
    iteration: Mapped[int | None] = mapped_column(Integer)
    model_version_id: Mapped[int | None] = mapped_column(ForeignKey("model_versions.id"))
    created_at: Mapped[datetime] = _ts()

    candidates: Mapped[list[Candidate]] = relationship(
        back_populates="prompt", primaryjoin="Prompt.id == foreign(Candidate.prompt_id)"
    )


class Candidate(Base):
    __tablename__ = "candidates"
    __table_args__ = (UniqueConstraint("prompt_id", "content_hash"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    # No foreign-key constraint to prompts, as for rankings below.
    prompt_id: Mapped[int] = mapped_column(Integer)  # looked up through the unique key it leads
    # NULL for one assistant message; else the reply's turns, and `text` their transcript.
    text: Mapped[str] = mapped_column(Text)
    messages: Mapped[list[Any] | None] = mapped_column(JSON(none_as_null=True))
    content_hash: Mapped[str] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(300))
    model_version_id: Mapped[int | None] = mapped_column(ForeignKey("model_versions.id"))
    sampling: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    iteration: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = _ts()

    prompt: Mapped[Prompt] = relationship(
        back_populates="candidates", primaryjoin="Prompt.id == foreign(Candidate.prompt_id)"
    )


class Annotator(Base):
    """A human (import name or Label Studio user) or an AI judge configuration."""

    __tablename__ = "annotators"
    # name first: imports look annotators up by name.
    __table_args__ = (UniqueConstraint("name", "kind"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(10))
    # Humans: the import name or Label Studio email. Never exported: see `pseudonym`.
    name: Mapped[str] = mapped_column(String(300))
    pseudonym: Mapped[str] = mapped_column(String(40), unique=True)
    ls_user_id: Mapped[int | None] = mapped_column(Integer)
    judge_kind: Mapped[str | None] = mapped_column(String(40))
    model: Mapped[str | None] = mapped_column(String(300))
    config: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = _ts()


class RawRecord(Base):
    """An external payload exactly as received, stored before it is parsed."""

    __tablename__ = "raw_records"
    # payload_hash first: imports look records up by hash. `serve`'s deliveries by status (imports never write it).
    __table_args__ = (
        UniqueConstraint("payload_hash", "source"),
        Index(
            "ix_raw_records_deliveries",
            "status",
            "id",
            sqlite_where=text("source = 'label-studio:webhook'"),
            postgresql_where=text("source = 'label-studio:webhook'"),
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    source: Mapped[str] = mapped_column(String(40))  # "import:rankings", "label-studio", ...
    origin: Mapped[str | None] = mapped_column(String(500))  # file path, project id
    locator: Mapped[str | None] = mapped_column(String(200))  # line number, annotation id
    # What was received, as text. Bytes text cannot hold (not UTF-8, a NUL, a line too long to keep whole) are kept
    # exactly in `payload_bytes`, `payload` showing them escaped. `payload_hash`: SHA-256 of all the bytes received.
    payload: Mapped[str] = mapped_column(Text)
    payload_bytes: Mapped[bytes | None] = mapped_column(LargeBinary)
    payload_hash: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(12), default=RawStatus.ok.value)
    reason: Mapped[str | None] = mapped_column(Text)
    received_at: Mapped[datetime] = _ts()


OVERALL = "overall"  # the criterion of a ranking that names none: the one order asked for


class Criterion(Base):
    """What a ranking orders by ("helpfulness", "harmlessness"…), with the rubric annotators and judges see.

    A ranking names its criterion (`Ranking.criterion`); a criterion is written here the first time a
    ranking or a setup names it. Pairs, agreement and quality compare rankings of one criterion only.
    """

    __tablename__ = "criteria"

    name: Mapped[str] = mapped_column(String(40), primary_key=True)
    description: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _ts()


class Ranking(Base):
    """One annotator's ordering of a prompt's candidates by one criterion, as tiers (best first)."""

    __tablename__ = "rankings"
    __table_args__ = (
        # external_id first: imports and syncs look rankings up by their external id. One ranking per
        # criterion: a dataset row or an annotation may order the same replies by several.
        UniqueConstraint("external_id", "annotator_id", "source", "version", "criterion"),
        Index("ix_rankings_prompt_status", "prompt_id", "status"),
        # `ls sync` finds an annotation's earlier versions by its Label Studio ids.
        Index("ix_rankings_ls_annotation", "ls_project_id", "ls_annotation_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    # No foreign-key constraints to prompts, annotators and raw records: a ranking is written in the transaction
    # that finds or creates them, and nothing deletes them, so the references hold by construction (a candidate's
    # prompt likewise). On Postgres each constraint cost a trigger per row written (bench/README.md, issue 15).
    prompt_id: Mapped[int] = mapped_column(Integer)
    annotator_id: Mapped[int] = mapped_column(Integer, index=True)
    source: Mapped[str] = mapped_column(String(20))  # import | label-studio | judge
    external_id: Mapped[str] = mapped_column(String(200))
    version: Mapped[int] = mapped_column(Integer, default=1)
    # criteria.name (no foreign key, as above): what the order is by; `overall` where the source names none.
    criterion: Mapped[str] = mapped_column(String(40), default=OVERALL, server_default=OVERALL)
    status: Mapped[str] = mapped_column(String(12), default=RankingStatus.valid.value)
    n_tiers: Mapped[int] = mapped_column(Integer, default=0)
    same_as_shown: Mapped[bool] = mapped_column(Boolean, default=False)
    raw_record_id: Mapped[int | None] = mapped_column(Integer)
    ls_project_id: Mapped[int | None] = mapped_column(Integer)
    ls_task_id: Mapped[int | None] = mapped_column(Integer)
    ls_annotation_id: Mapped[int | None] = mapped_column(Integer)
    judge_run: Mapped[str | None] = mapped_column(String(100))
    iteration: Mapped[int | None] = mapped_column(Integer)
    # Seconds the annotator spent on the task, as Label Studio recorded it (`lead_time`).
    lead_time: Mapped[float | None] = mapped_column(Float)
    # What a public dataset said beyond the order, as given: a verdict ("tie (bothbad)"), a score ratio…
    details: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    # Whether the comparisons hold this ranking's pairs (as of the last `pairs build`): a
    # build rewrites only the rankings where this differs from what the build would take.
    in_pairs: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[datetime] = _ts()
    updated_at: Mapped[datetime] = _ts()

    items: Mapped[list[RankingItem]] = relationship(
        back_populates="ranking",
        cascade="all, delete-orphan",
        order_by="RankingItem.candidate_id",
        primaryjoin="Ranking.id == foreign(RankingItem.ranking_id)",
    )
    annotator: Mapped[Annotator] = relationship(primaryjoin="Annotator.id == foreign(Ranking.annotator_id)")

    def tiers(self) -> list[list[int]]:
        """Candidate ids by tier, best first."""
        out: dict[int, list[int]] = {}
        for item in self.items:
            if item.tier is not None:
                out.setdefault(item.tier, []).append(item.candidate_id)
        return [sorted(out[t]) for t in sorted(out)]

    def shown_order(self) -> list[int]:
        shown = [i for i in self.items if i.shown_position is not None]
        return [i.candidate_id for i in sorted(shown, key=lambda i: i.shown_position)]


class RankingItem(Base):
    __tablename__ = "ranking_items"
    # Read by ranking only: the primary key serves it; on SQLite the rows are stored in its order.
    __table_args__ = {"sqlite_with_rowid": False}  # noqa: RUF012 (SQLAlchemy reads it)

    # No foreign-key constraints, as for rankings: items are written with their ranking, in the
    # transaction that finds or creates their candidates (15 s of a 100k-ranking Postgres import).
    ranking_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    candidate_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tier: Mapped[int | None] = mapped_column(Integer)  # 0 = best; NULL = shown, not ranked
    shown_position: Mapped[int | None] = mapped_column(Integer)
    # The judge or reward-model score behind the tier (margins use it), and how it was got.
    score: Mapped[float | None] = mapped_column(Float)
    details: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    model: Mapped[str | None] = mapped_column(String(300))  # its author in this ranking (NULL: the candidate's)

    ranking: Mapped[Ranking] = relationship(
        back_populates="items", primaryjoin="Ranking.id == foreign(RankingItem.ranking_id)"
    )


class PairBuild(Base):
    """The settings of one `pairs build`; the comparisons table holds the latest."""

    __tablename__ = "pair_builds"

    id: Mapped[int] = mapped_column(primary_key=True)
    strategy: Mapped[str] = mapped_column(String(20))
    aggregate: Mapped[str] = mapped_column(String(20))
    annotator_kind: Mapped[str] = mapped_column(String(10))
    n_rankings: Mapped[int] = mapped_column(Integer, default=0)
    n_pairs: Mapped[int] = mapped_column(Integer, default=0)
    # Annotators whose rankings this build left out, by pseudonym, with the reasons.
    excluded: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    mode: Mapped[str | None] = mapped_column(String(12))  # full | incremental
    n_changed: Mapped[int | None] = mapped_column(Integer)  # rankings that came in or went out
    created_at: Mapped[datetime] = _ts()


class Comparison(Base):
    """A derived pair: `chosen` was preferred to `rejected` for the prompt.

    Comparisons are a disposable materialisation: `pairs build` rewrites them (those
    of the rankings that changed, or all) in one transaction, by an INSERT … SELECT
    over the rankings and their items; `build_id` is the build that
    wrote the pair. They carry no foreign keys themselves:
    on Postgres each one is a trigger per row, and with them writing two million
    pairs took 10× as long (see bench/README.md).
    """

    __tablename__ = "comparisons"
    __table_args__ = (Index("ix_comparisons_prompt", "prompt_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    build_id: Mapped[int] = mapped_column(Integer)  # pair_builds.id (not indexed: nothing looks pairs up by it)
    prompt_id: Mapped[int] = mapped_column(Integer)  # prompts.id
    chosen_id: Mapped[int] = mapped_column(Integer)  # candidates.id
    rejected_id: Mapped[int] = mapped_column(Integer)  # candidates.id
    # rankings.id; NULL for aggregated pairs. The annotator is the ranking's.
    ranking_id: Mapped[int | None] = mapped_column(Integer, index=True)
    annotator_kind: Mapped[str] = mapped_column(String(10))  # human | ai | mixed
    # The criterion of the rankings the pair came from: pairs of two criteria are never combined by a build.
    criterion: Mapped[str] = mapped_column(String(40), default=OVERALL, server_default=OVERALL)
    margin: Mapped[float] = mapped_column(Float)
    weight: Mapped[float] = mapped_column(Float, default=1.0)
