"""The model the server serves: its version, shown in Label Studio, and retraining on arrival.

Every half minute, and whenever deliveries or a sync brought rankings, the `model` worker:

1. with `--retrain-every N`, counts the human rankings made since the last retrain
   (the retrain job's own baseline) and, at N or more, runs `preflab retrain` as a child
   process: the job with its lease lock, so the server never loads torch, a crash in
   training cannot take it down, and two servers never train at once. A failed run
   leaves the current version serving; /health says so, and the next try waits for N
   more rankings;
2. reads the model version /setup answers; when it changed (this retrain, or one run by
   `preflab schedule`), wakes the `scoring` worker to load its model, and sets each Label
   Studio project that showed an older one of ours to the new one, so annotators see the
   new predictions.
"""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Callable
from datetime import datetime, timezone

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from preflab.db.models import Annotator, AnnotatorKind, Ranking, RankingStatus
from preflab.db.transactions import in_transaction
from preflab.server.studio import Studio, stale_versions
from preflab.server.workers import Activity, Loop, _now

log = logging.getLogger("preflab.server")
MODEL_EVERY = 30.0


def rankings_since(session: Session, since: datetime | None) -> int:
    """Valid human rankings made after `since` (all of them when None)."""
    query = (
        select(func.count())
        .select_from(Ranking)
        .join(Annotator, Annotator.id == Ranking.annotator_id)
        .where(Annotator.kind == AnnotatorKind.human.value, Ranking.status == RankingStatus.valid.value)
    )
    if since is not None:
        query = query.where(Ranking.created_at > since)
    return session.scalar(query)


def retrain_baseline(session: Session) -> datetime | None:
    """Where the retrain job's own count starts: the rankings its last successful run trained on."""
    from preflab.training.retrain.job import last_trained_dataset

    version = last_trained_dataset(session)
    return datetime.fromisoformat(version.settings["rankings_until"]) if version else None


class ModelWorker:
    """Keeps the served model version current, in Label Studio too; retrains on arrival when asked."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        studio: Studio,
        judge: str | None,
        judge_options: dict,
        database_url: str,
        model: str,
        retrain_every: int | None = None,
        retrain_config: str | None = None,
        changed: Callable[[], None] = lambda: None,
    ):
        self.sessions, self.studio, self.judge, self.judge_options = sessions, studio, judge, judge_options
        self.changed = changed  # the version served changed: load its model
        self.database_url, self.model = database_url, model
        self.retrain_every, self.retrain_config = retrain_every, retrain_config
        self.serving: str | None = None  # the version /setup answers now
        self.shown: str | None = None  # the version Label Studio's projects were last set to
        self.served: set[str] = set()  # every version this process answered
        self.failed_at: datetime | None = None  # a failed retrain: the next waits for N rankings after it
        self.child: subprocess.Popen | None = None
        self.retrain = Activity(detail={"state": "off" if retrain_every is None else "waiting"})
        self.loop = Loop(
            "model", self.step, MODEL_EVERY, Activity(detail={"model_version": None, "shown_in_label_studio": None})
        )

    def version(self, session: Session) -> str:
        """The model version /setup and /predict answer with (remembered as one this server served)."""
        from preflab.labelling.studio.backend import model_version

        current = model_version(session, self.judge, **self.judge_options)
        self.served.add(current)
        return current

    def step(self) -> None:
        if self.retrain_every is not None:
            self.maybe_retrain()
        self.publish()
        self.loop.activity.ok(model_version=self.serving, shown_in_label_studio=self.shown)

    def maybe_retrain(self) -> None:
        def count(session: Session) -> int:
            baseline = retrain_baseline(session)
            since = max(filter(None, (baseline, self.failed_at)), default=None)
            return rankings_since(session, since)

        new = in_transaction(self.sessions, count)
        self.retrain.detail.update(new_rankings=new, needed=self.retrain_every)
        if new < self.retrain_every or self.loop.stopping.is_set():
            return
        started = datetime.now(timezone.utc)
        self.retrain.detail.update(
            state="running", started_at=_now(), attempts=self.retrain.detail.get("attempts", 0) + 1
        )
        log.info("%d new human rankings (at least %d): starting `preflab retrain`", new, self.retrain_every)
        status, message = self.run_retrain()
        if status == "failed":
            self.failed_at = started
            self.retrain.failed(RuntimeError(message))
            self.retrain.detail.update(state="failed")
            log.error("retrain failed; %s keeps serving: %s", self.serving or "the current version", message)
            return
        self.failed_at = None
        self.retrain.ok(state="trained" if status == "trained" else "waiting", result=message)
        log.info("retrain: %s", message)

    def run_retrain(self) -> tuple[str, str]:
        """`preflab retrain --min-new 0 --json` as a child process: (status, one-line message)."""
        from preflab.training.retrain.schedule import retrain_job

        job = retrain_job(self.database_url, self.model, self.retrain_config, 0)
        self.child = subprocess.Popen(
            [*job.argv, "--json"], env=job.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            out, err = self.child.communicate()
        finally:
            code, self.child = self.child.returncode, None
        if code == 0:
            try:
                result = json.loads(out)
                return result.get("status", "trained"), result.get("message", "")
            except ValueError:
                return "trained", out.strip().splitlines()[-1] if out.strip() else "done"
        lines = [line for line in err.strip().splitlines() if line.strip()]
        return "failed", (lines[-1] if lines else f"exit status {code}")[:500]

    def publish(self) -> None:
        """Read the version served; when it changed, show it in the projects that showed an older one of ours."""

        def read(session: Session) -> tuple[str, list[int], set[str]]:
            current = self.version(session)
            return current, self.studio.project_ids(session), stale_versions(session, self.served, current)

        current, projects, stale = in_transaction(self.sessions, read)
        if current != self.serving:
            if self.serving is not None:
                log.info("model version changed: %s → %s", self.serving, current)
                self.changed()
            self.serving = current
        if self.shown != current:
            changed = self.studio.show_version(projects, current, stale)
            if changed:
                log.info("Label Studio projects %s now show model version %s", ", ".join(map(str, changed)), current)
            self.shown = current

    def stop(self) -> None:
        """Stop the loop; a retrain under way is sent SIGTERM, which records its run as failed and frees its lease."""
        self.loop.stop()
        child = self.child
        if child is not None and child.poll() is None:
            child.terminate()

    def health(self) -> dict:
        return {"retrain": self.retrain.as_dict()}
