"""Run the app under uvicorn: the checks before binding, the log, and several processes with --workers.

uvicorn owns the signals: SIGTERM or Ctrl-C stops accepting connections, lets the
requests in flight finish (a delivery being stored is one of them) for up to
`GRACEFUL_SECONDS`, then runs the app's shutdown, which lets each worker finish its step.
"""

from __future__ import annotations

import json
import logging
import os
import sys

from preflab.server.config import ServeConfig, check_bind, webhook_secret
from preflab.settings import Settings

GRACEFUL_SECONDS = 30
CHILD_ENV = "PREFLAB_SERVE_CHILD"  # what the processes of --workers N build their app from (no secret in it)
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def logging_config() -> dict:
    """preflab's records and uvicorn's own at INFO on stderr; uvicorn's access log off (ours is structured)."""
    handler = {"class": "logging.StreamHandler", "stream": "ext://sys.stderr", "formatter": "plain"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": LOG_FORMAT}},
        "handlers": {"stderr": handler},
        "loggers": {
            "preflab": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
            "uvicorn": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
            # Every HTTP request preflab makes to Label Studio would be a line; its errors still show.
            "httpx": {"level": "WARNING"},
        },
    }


def check(settings: Settings, config: ServeConfig) -> None:
    """Everything that can be refused in one sentence, before anything listens.

    Raises:
        ConfigError: a non-loopback address with no secret, no Label Studio URL, no retrain config.
        DatabaseError: the store cannot be opened (or is not migrated).
    """
    check_bind(config.host, webhook_secret())
    from preflab.db.transactions import in_transaction
    from preflab.server.services import build_services

    services = build_services(settings, config)  # opens (a new SQLite file: creates) the store
    path = config.retrain_config_path()
    if path:
        from preflab.training.retrain.config import load_retrain_config

        load_retrain_config(path)  # a broken config fails now, not at the first retrain
    in_transaction(services.sessions, services.model.version)  # a judge that does not exist, say


def serve(settings: Settings, config: ServeConfig) -> None:
    """The `serve` job: listen on host:port until SIGTERM or Ctrl-C."""
    import uvicorn

    check(settings, config)
    common = {
        "host": config.host,
        "port": config.port,
        "log_config": logging_config(),
        "access_log": False,
        "timeout_graceful_shutdown": GRACEFUL_SECONDS,
        "proxy_headers": True,
        "server_header": False,
    }
    if config.workers == 1:
        from preflab.server.app import create_app

        uvicorn.run(create_app(settings, config), **common)
        return
    # Several processes: each builds its app from the environment (uvicorn imports the factory by name).
    os.environ[CHILD_ENV] = json.dumps(
        {
            "settings": {
                "database_url": settings.database_url,
                "label_studio_url": settings.label_studio_url,
                "model": settings.model,
            },
            "config": config.as_dict(),
        }
    )
    uvicorn.run("preflab.server.run:app_from_env", factory=True, workers=config.workers, **common)


def app_from_env():
    """The app of one of the --workers processes."""
    from preflab.server.app import create_app

    given = json.loads(os.environ[CHILD_ENV])
    try:
        return create_app(Settings(**given["settings"]), ServeConfig(**given["config"]))
    except Exception as exc:  # one line, as the parent would have said it
        logging.getLogger("preflab.server").error("cannot start: %s", exc)
        sys.exit(1)
