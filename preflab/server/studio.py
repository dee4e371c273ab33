"""The server's side of Label Studio: a client made when first needed, the projects to sync, and the
project `model_version` that decides which predictions annotators see.

The server starts whether or not Label Studio answers: deliveries are stored either way,
and what needs Label Studio (user emails while parsing, `ls sync`, the project's
model_version) is tried again by the worker that needs it.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy import select
from sqlalchemy.orm import Session

from preflab.db.models import LSProject, ModelVersion
from preflab.errors import LabelStudioError
from preflab.labelling.studio.client import LabelStudioClient
from preflab.labelling.studio.projects import EXPORT_BASE_URL, server_key

log = logging.getLogger("preflab.server")
RETRIEVE_TIMEOUT = 900  # seconds Label Studio may take to ask /predict for every task of a project


class Studio:
    """Label Studio at `base_url`, with the token from LABEL_STUDIO_API_KEY (read when first connecting)."""

    def __init__(self, base_url: str):
        self.base_url = base_url.rstrip("/")
        self._client: LabelStudioClient | None = None
        self._lock = threading.Lock()
        self.seen_projects: set[int] = set()  # projects that called /setup or /predict since start

    def client(self) -> LabelStudioClient:
        with self._lock:
            if self._client is None:
                # No retry while connecting: the worker that asked tries again later, and must not stall.
                client = LabelStudioClient.connect(self.base_url, retries=0, timeout=30.0)
                client.retries = 3  # once connected, a blip in the middle of a sync is retried
                self._client = client
            return self._client

    def users(self) -> dict[int, str]:
        """Label Studio user id → email, asked afresh (a user who signed up a second ago is in it)."""
        return self.client().users()

    def project_ids(self, session: Session) -> list[int]:
        """The projects preflab knows on this server, and those that called this server since it started."""
        key = server_key(self.base_url)
        known = {
            row.project_id
            for row in session.scalars(select(LSProject))
            if row.base_url != EXPORT_BASE_URL and server_key(row.base_url) == key
        }
        return sorted(known | self.seen_projects)

    def show_version(self, project_ids: list[int], new: str, stale: set[str]) -> list[int]:
        """Show `new` in the projects that show one of our `stale` versions; returns those that now show it.

        Label Studio shows annotators only the predictions whose model_version is the
        project's, and takes a project model_version only once predictions of it exist. So
        it is first asked to retrieve predictions (the Data Manager's action: it calls
        this server's /predict for the tasks that lack one of `new`), then set. A project
        showing the ML backend's live predictions (its title), another model's, or none
        yet (Label Studio then takes the first version it stores) is left as it is.
        """
        client, changed = self.client(), []
        for project_id in project_ids:
            try:
                shown = getattr(client.get_project(project_id), "model_version", None)
                if not shown or shown == new or shown not in stale:
                    continue
                client.call(
                    f"retrieve the predictions of project {project_id}",
                    client.sdk.actions.create,
                    id="retrieve_tasks_predictions",
                    project=project_id,
                    selected_items={"all": True, "excluded": []},
                    idempotent=False,
                    request_options={"timeout_in_seconds": RETRIEVE_TIMEOUT},
                )
                client.call(
                    f"set the model version of project {project_id}",
                    client.sdk.projects.update,
                    project_id,
                    model_version=new,
                )
                changed.append(project_id)
            except LabelStudioError as exc:
                status = getattr(exc, "status", None)
                if status == 404:  # a project deleted in Label Studio: the others still change
                    continue
                if status == 400:  # no prediction of `new` there (no ML backend connected, say)
                    log.warning("project %d still shows %s: %s", project_id, shown, exc)
                    continue
                raise
        return changed


def stale_versions(session: Session, served: set[str], current: str) -> set[str]:
    """Versions a project may show that the current one replaces: those served before, and every model version."""
    names = set(session.scalars(select(ModelVersion.name)))
    return (names | served) - {current}
