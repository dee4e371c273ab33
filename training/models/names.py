"""Model names: what `--model NAME` means, and the model version it is recorded as.

NAME may be a model version (its saved path is loaded), an embedded name, a local
path or a hub id. Every command that loads a model resolves it here, so a
candidate, a judgement or a training run always links to the model behind it.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from preflab.db.models import ModelVersion
from preflab.db.store import insert_ignore


def model_version_id(session: Session, label: str, path: str | None = None) -> int:
    """The ModelVersion a model label names, created as a `base` version when new."""
    found = session.scalar(select(ModelVersion.id).where(
        (ModelVersion.name == label) | (ModelVersion.path == label)).order_by(ModelVersion.id).limit(1))
    if found is not None:
        return found
    insert_ignore(session, ModelVersion.__table__,
                  [{"name": label[:200], "kind": "base", "base_model": label, "path": path}], ["name"])
    return session.scalar(select(ModelVersion.id).where(ModelVersion.name == label[:200]))


def resolve_model(session: Session, name: str, record: bool = True) -> tuple[str, str, int | None]:
    """(label, what to load, model version id) for `--model NAME`.

    With `record`, a model seen for the first time becomes a `base` model version,
    so every candidate links to the model that wrote it; without it (judges) the
    version id is None unless NAME is a model version.
    """
    from preflab.training.models.loading import model_label

    row = session.execute(select(ModelVersion.id, ModelVersion.path).where(
        ModelVersion.name == name, ModelVersion.path.is_not(None))).first()
    if row is not None:
        return name, row.path, row.id
    label = model_label(name)
    if not record:
        return label, name, None
    path = label if Path(label).is_absolute() else None
    return label, name, model_version_id(session, label, path)
