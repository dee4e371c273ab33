"""Label Studio projects as preflab knows them: `LSProject` rows, and `ls init`."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from preflab.db.models import LSProject
from preflab.errors import InputError, NotFound
from preflab.labelling.studio.client import LabelStudioClient
from preflab.templates import TEMPLATES, bucket_names, label_config

CUSTOM = "custom"  # a project preflab did not create: its template is whatever its owner wrote
EXPORT_BASE_URL = "file:"  # the server of an export file imported with no Label Studio URL


@dataclass(frozen=True)
class ProjectInfo:
    """What sync and push need to know of a project, detached from any session."""

    id: int  # LSProject.id (preflab's row)
    base_url: str
    project_id: int  # the project's id in Label Studio
    title: str
    template: str
    label_config: str
    # The tiers of a bucket ranking when the caller names them (an export of an unknown project).
    bucket_order: tuple[str, ...] | None = None

    @property
    def buckets(self) -> list[str] | None:
        return list(self.bucket_order) if self.bucket_order else bucket_names(self.label_config)

    def as_dict(self) -> dict:
        return {"id": self.id, "project_id": self.project_id, "base_url": self.base_url, "title": self.title,
                "template": self.template, "url": f"{self.base_url}/projects/{self.project_id}"}


def info(row: LSProject) -> ProjectInfo:
    return ProjectInfo(row.id, row.base_url, row.project_id, row.title, row.template, row.label_config)


def ensure_project(session: Session, base_url: str, project_id: int, *, title: str, template: str = CUSTOM,
                   label_config: str = "") -> ProjectInfo:
    """The row of Label Studio project `project_id` at `base_url`, created if new."""
    row = session.scalar(select(LSProject).where(LSProject.base_url == base_url, LSProject.project_id == project_id))
    if row is None:
        row = LSProject(base_url=base_url, project_id=project_id, title=title[:300], template=template,
                        label_config=label_config)
        session.add(row)
        session.flush()
    elif label_config and not row.label_config:
        row.label_config = label_config
    return info(row)


def find_project(session: Session, base_url: str, project_id: int | None) -> ProjectInfo:
    """The project `project_id` on `base_url`; without an id, the only one preflab knows there."""
    query = select(LSProject).where(LSProject.base_url == base_url)
    if project_id is not None:
        row = session.scalar(query.where(LSProject.project_id == project_id))
        if row is None:
            raise NotFound(f"preflab has no Label Studio project {project_id} at {base_url}; "
                           "create one with `preflab ls init`")
        return info(row)
    rows = session.scalars(query.order_by(LSProject.id)).all()
    if len(rows) == 1:
        return info(rows[0])
    if not rows:
        raise NotFound(f"preflab has no Label Studio project at {base_url}; create one with `preflab ls init`")
    ids = ", ".join(str(r.project_id) for r in rows)
    raise InputError(f"preflab knows several projects at {base_url} ({ids}); choose one with --project")


def init_project(sessions: sessionmaker[Session], client: LabelStudioClient, template: str, title: str,
                 annotators_per_task: int = 3, show_predictions: bool = False,
                 description: str | None = None) -> ProjectInfo:
    """The `ls init` job: create a Label Studio project from a preflab template and record it.

    The row is written only once Label Studio has made the project (and the
    project is deleted again if the row cannot be written), so the job owns
    its one transaction.

    Several annotators see each task (`annotators_per_task`, overlap on every
    task); predictions (AI pre-annotations) stay hidden from annotators unless
    `show_predictions`, so judges do not anchor the people they are compared with.
    """
    if template not in TEMPLATES:
        raise InputError(f"unknown template {template!r} (expected one of {', '.join(TEMPLATES)})")
    if annotators_per_task < 1:
        raise InputError("--annotators-per-task must be at least 1")
    config = label_config(template)
    project = client.create_project(
        title=title, label_config=config, description=description or f"preflab {template} project",
        maximum_annotations=annotators_per_task, overlap_cohort_percentage=100,
        show_collab_predictions=show_predictions, show_skip_button=True,
    )
    try:
        with sessions.begin() as session:
            return ensure_project(session, client.base_url, project.id, title=title, template=template,
                                  label_config=config)
    except Exception:
        # Keep Label Studio and the database in step: no project preflab does not know of.
        client.delete_project(project.id)
        raise
