"""The preflab data model (SQLAlchemy 2.0, typed), a module per concern; every table is imported from here.

`base` holds the declarative base and its naming convention; `rankings` what was ranked
and the pairs built from it; `lineage` the dataset versions, training runs and model
versions made from them; `studio` Label Studio's projects and tasks, and the gold answers.
Importing the package maps every one of them, so `Base.metadata` (Alembic's target)
holds all their tables.
"""

from preflab.db.models.base import NAMING_CONVENTION, Base, utcnow
from preflab.db.models.lineage import DatasetVersion, JobLock, ModelVersion, SelfRewardIteration, TrainingRun
from preflab.db.models.rankings import (
    OVERALL,
    Annotator,
    AnnotatorKind,
    Candidate,
    Comparison,
    Criterion,
    PairBuild,
    Prompt,
    Ranking,
    RankingItem,
    RankingStatus,
    RawRecord,
    RawStatus,
)
from preflab.db.models.studio import GoldAnswer, LSProject, LSTask

__all__ = [
    "NAMING_CONVENTION",
    "OVERALL",
    "Annotator",
    "AnnotatorKind",
    "Base",
    "Candidate",
    "Comparison",
    "Criterion",
    "DatasetVersion",
    "GoldAnswer",
    "JobLock",
    "LSProject",
    "LSTask",
    "ModelVersion",
    "PairBuild",
    "Prompt",
    "Ranking",
    "RankingItem",
    "RankingStatus",
    "RawRecord",
    "RawStatus",
    "SelfRewardIteration",
    "TrainingRun",
    "utcnow",
]
