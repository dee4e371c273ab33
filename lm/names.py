"""Model names: what `--model NAME` means, and the model version it is recorded as.

NAME may be a model version (its saved path is loaded), an embedded name, a local
path or a hub id. Every command that loads a model resolves it here, so a
candidate, a judgement or a training run always links to the model behind it.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from preflab.db.models import ModelVersion
from preflab.db.store import insert_ignore


def model_version_id(session: Session, label: str, path: str | None = None) -> int:
    """The ModelVersion a model label names, created as a `base` version when new."""
    found = session.scalar(
        select(ModelVersion.id)
        .where((ModelVersion.name == label) | (ModelVersion.path == label))
        .order_by(ModelVersion.id)
        .limit(1)
    )
    if found is not None:
        return found
    insert_ignore(
        session,
        ModelVersion.__table__,
        [{"name": label[:200], "kind": "base", "base_model": label, "path": path}],
        ["name"],
    )
    return session.scalar(select(ModelVersion.id).where(ModelVersion.name == label[:200]))


def resolve_model(session: Session, name: str, record: bool = True) -> tuple[str, str, int | None]:
    """(label, what to load, model version id) for `--model NAME`.

    With `record`, a model seen for the first time becomes a `base` model version,
    so every candidate links to the model that wrote it; without it (judges) the
    version id is None unless NAME is a model version.
    """
    from preflab.lm.loading import model_label

    row = session.execute(
        select(ModelVersion.id, ModelVersion.path).where(ModelVersion.name == name, ModelVersion.path.is_not(None))
    ).first()
    if row is not None:
        return name, row.path, row.id
    label = model_label(name)
    if not record:
        return label, name, None
    path = label if Path(label).is_absolute() else None
    return label, name, model_version_id(session, label, path)


@dataclass
class NamedModel:
    """A model resolved from `--model NAME` and loaded: what a job runs and what it records."""

    label: str  # stored on candidates and judges
    location: str  # what was loaded: a path or hub id
    version_id: int | None  # its model version, when recorded
    model: Any
    tokenizer: Any


class ModelCache:
    """Models loaded by location, kept while a job needs them (one load per model per job)."""

    def __init__(self) -> None:
        self.loaded: dict[tuple[str, bool, bool], tuple[Any, Any]] = {}

    def get(self, location: str, scorer: bool = False, heads: bool = False) -> tuple[Any, Any]:
        """(model, tokenizer) at `location`: a causal LM, or with `scorer` a one-label classifier (with `heads`, one
        of several labels too: a multi-objective reward model)."""
        from preflab.lm.loading import load_causal_lm, load_sequence_scorer

        key = (location, scorer, heads)
        if key not in self.loaded:
            self.loaded[key] = load_sequence_scorer(location, heads=heads) if scorer else load_causal_lm(location)
        return self.loaded[key]

    def clear(self) -> None:
        self.loaded.clear()
        gc.collect()


def load_named_model(
    sessions: sessionmaker[Session],
    name: str,
    *,
    record: bool = True,
    scorer: bool = False,
    heads: bool = False,
    cache: ModelCache | None = None,
) -> NamedModel:
    """Resolve `--model NAME` (recording a new base model version with `record`), then load it.

    The resolution is its own short transaction, so the slow load holds no database lock.
    """
    with sessions.begin() as session:
        label, location, version_id = resolve_model(session, name, record=record)
    model, tokenizer = (cache or ModelCache()).get(location, scorer=scorer, heads=heads)
    return NamedModel(label, location, version_id, model, tokenizer)
