"""Label Studio projects as preflab knows them: `LSProject` rows, and `ls init`."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from preflab.db.models import LSProject
from preflab.db.store import ensure_criteria
from preflab.errors import InputError, NotFound
from preflab.labelling.criteria import read_criteria_file
from preflab.labelling.studio.client import LabelStudioClient
from preflab.labelling.studio.criteria import criteria_descriptions
from preflab.templates import TEMPLATES, bucket_names, label_config, ranker_buckets

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

    @property
    def rankers(self) -> list[str] | dict[str, list[str]] | None:
        """The buckets results are read with: each Ranker's by its name when the template has several
        (a Ranker per criterion), else `buckets`."""
        by_ranker = ranker_buckets(self.label_config)
        if len(by_ranker) < 2:
            return self.buckets
        return {name: list(self.bucket_order) if self.bucket_order else b for name, b in by_ranker.items()}

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "project_id": self.project_id,
            "base_url": self.base_url,
            "title": self.title,
            "template": self.template,
            "url": f"{self.base_url}/projects/{self.project_id}",
        }


def info(row: LSProject) -> ProjectInfo:
    return ProjectInfo(row.id, row.base_url, row.project_id, row.title, row.template, row.label_config)


def server_key(base_url: str) -> str:
    """The server a URL names, whatever its spelling: one key for one Label Studio.

    Scheme and host are case-insensitive, a default port (80, 443) may be left
    out, and every loopback name (localhost, 127.0.0.1, [::1]) is this machine.
    """
    parts = urlsplit(base_url.strip())
    if not parts.scheme or not parts.hostname:
        return base_url.strip().rstrip("/")  # "file:" (an export), or something that is no URL
    scheme, host = parts.scheme.lower(), parts.hostname.lower()
    try:
        port = parts.port or {"http": 80, "https": 443}.get(scheme)
    except ValueError:  # a port that is no number: compare the text as it is
        return base_url.strip().rstrip("/").lower()
    try:
        if ipaddress.ip_address(host).is_loopback:
            host = "localhost"
    except ValueError:
        if host == "localhost" or host.endswith(".localhost"):
            host = "localhost"
    return f"{scheme}://{host}:{port}{parts.path.rstrip('/')}"


def _rows_at(session: Session, base_url: str) -> list[LSProject]:
    # A handful of rows: compared in Python, so old rows written under another spelling match too.
    key = server_key(base_url)
    return [row for row in session.scalars(select(LSProject).order_by(LSProject.id)) if server_key(row.base_url) == key]


def same_server(session: Session, project: ProjectInfo) -> list[int]:
    """The ids of the projects preflab knows on this project's server (a user's ids hold across them).

    An export read with no server is its own: user 5 of one file need not be user 5 of another.
    """
    if project.base_url == EXPORT_BASE_URL:
        return [project.id]
    return [row.id for row in _rows_at(session, project.base_url)] or [project.id]


def ensure_project(
    session: Session, base_url: str, project_id: int, *, title: str, template: str = CUSTOM, label_config: str = ""
) -> ProjectInfo:
    """The row of Label Studio project `project_id` at `base_url` (under any spelling), created if new."""
    row = next((r for r in _rows_at(session, base_url) if r.project_id == project_id), None)
    if row is None:
        row = LSProject(
            base_url=base_url, project_id=project_id, title=title[:300], template=template, label_config=label_config
        )
        session.add(row)
        session.flush()
    elif label_config and not row.label_config:
        row.label_config = label_config
    return info(row)


def _known_elsewhere(session: Session, base_url: str) -> str:
    """What to do when no project matches: the projects preflab knows on other servers, or `ls init`."""
    rows = [
        r
        for r in session.scalars(select(LSProject).order_by(LSProject.id))
        if r.base_url != EXPORT_BASE_URL and server_key(r.base_url) != server_key(base_url)
    ]
    if not rows:
        return "create one with `preflab ls init`"
    known = "; ".join(f'project {r.project_id} "{r.title}" at {r.base_url}' for r in rows[:10])
    more = f" and {len(rows) - 10:,} more" if len(rows) > 10 else ""
    return (
        f"it knows {known}{more}. If one of these servers is this one under another address, "
        "set LABEL_STUDIO_URL (or --label-studio-url) to that address; else create a project with "
        "`preflab ls init`"
    )


def find_project(session: Session, base_url: str, project_id: int | None) -> ProjectInfo:
    """The project `project_id` on `base_url`; without an id, the only one preflab knows there."""
    rows = _rows_at(session, base_url)
    if project_id is not None:
        row = next((r for r in rows if r.project_id == project_id), None)
        if row is None:
            raise NotFound(
                f"preflab has no Label Studio project {project_id} at {base_url}; {_known_elsewhere(session, base_url)}"
            )
        return info(row)
    if len(rows) == 1:
        return info(rows[0])
    if not rows:
        raise NotFound(f"preflab has no Label Studio project at {base_url}; {_known_elsewhere(session, base_url)}")
    ids = ", ".join(str(r.project_id) for r in rows)
    raise InputError(f"preflab knows several projects at {base_url} ({ids}); choose one with --project")


def init_project(
    sessions: sessionmaker[Session],
    client: LabelStudioClient,
    template: str,
    title: str,
    annotators_per_task: int = 3,
    show_predictions: bool = False,
    description: str | None = None,
    criteria: Sequence[str] = (),
    criteria_file: str | None = None,
) -> ProjectInfo:
    """The `ls init` job: create a Label Studio project from a preflab template and record it.

    The row is written only once Label Studio has made the project (and the
    project is deleted again if the row cannot be written), so the job owns
    its one transaction.

    Several annotators see each task (`annotators_per_task`, overlap on every
    task); predictions (AI pre-annotations) stay hidden from annotators unless
    `show_predictions`, so judges do not anchor the people they are compared with.
    With `criteria`, each task is ranked once per criterion, each with its description
    (from `criteria_file`, else built in); the criteria are stored with their descriptions.
    """
    if template not in TEMPLATES:
        raise InputError(f"unknown template {template!r} (expected one of {', '.join(TEMPLATES)})")
    if annotators_per_task < 1:
        raise InputError("--annotators-per-task must be at least 1")
    given = read_criteria_file(criteria_file) if criteria_file else {}
    described = criteria_descriptions(criteria, given) if criteria else {}
    config = label_config(template, criteria, given)
    project = client.create_project(
        title=title,
        label_config=config,
        description=description
        or f"preflab {template} project" + (f", ranked by {', '.join(criteria)}" if criteria else ""),
        maximum_annotations=annotators_per_task,
        overlap_cohort_percentage=100,
        show_collab_predictions=show_predictions,
        show_skip_button=True,
    )
    try:
        with sessions.begin() as session:
            if described:
                ensure_criteria(session, described, described)
            return ensure_project(
                session, client.base_url, project.id, title=title, template=template, label_config=config
            )
    except Exception:
        # Keep Label Studio and the database in step: no project preflab does not know of.
        client.delete_project(project.id)
        raise
