"""What the endpoints share, and how `preflab serve` makes it: the store's sessions, Label Studio,
the secret, the receiver and the workers, built before anything listens (`build_services`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy.orm import Session, sessionmaker

from preflab.server.config import ServeConfig, webhook_secret
from preflab.server.receiver import Gate, Receiver
from preflab.server.retraining import ModelWorker
from preflab.server.scoring import Scorer
from preflab.server.studio import Studio
from preflab.server.workers import DeliveryWorker, SyncWorker
from preflab.settings import Settings


@dataclass
class Services:
    """What the endpoints share: the store, Label Studio, the secret and the workers."""

    config: ServeConfig
    sessions: sessionmaker[Session]
    studio: Studio
    secret: str | None
    receiver: Receiver
    deliveries: DeliveryWorker
    sync: SyncWorker
    model: ModelWorker
    scorer: Scorer
    started_at: str

    def loops(self):
        return [self.deliveries.loop, self.sync.loop, self.model.loop]


def build_services(settings: Settings, config: ServeConfig) -> Services:
    """Open the store (a SQLite file is created and migrated) and make the workers; starts nothing."""
    from preflab.db.engine import open_sessions
    from preflab.errors import ConfigError

    if not settings.label_studio_url:
        raise ConfigError("no Label Studio URL: set LABEL_STUDIO_URL or pass --label-studio-url")
    sessions = open_sessions(settings.database_url)
    studio = Studio(settings.label_studio_url)
    # With nothing trained and no --judge, the default model's likelihood judge serves (`served.py`).
    options = config.judge_options() | {"default": settings.model}
    scorer = Scorer(sessions, config.judge, options)
    model = ModelWorker(
        sessions,
        studio,
        config.judge,
        options,
        settings.database_url,
        settings.model,
        config.retrain_every,
        config.retrain_config_path(),
        changed=scorer.loop.wake,
    )
    sync = SyncWorker(sessions, studio, config.sync_seconds, after=model.loop.wake)
    gate = Gate()
    receiver = Receiver(sessions, gate)
    deliveries = DeliveryWorker(sessions, studio, after=model.loop.wake, gate=gate)
    return Services(
        config,
        sessions,
        studio,
        webhook_secret(),
        receiver,
        deliveries,
        sync,
        model,
        scorer,
        datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
