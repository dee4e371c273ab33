"""`preflab serve`: Label Studio's ML backend and webhook receiver, with its background workers."""

from __future__ import annotations

import click

from preflab.console import build_config, config_options, pass_settings
from preflab.server.config import ServeConfig
from preflab.settings import Settings


@click.command("serve")
@config_options(ServeConfig)
@pass_settings
def serve_command(settings: Settings, **options):
    """Serve Label Studio live: predictions, annotations as they are submitted, retraining on arrival.

    Label Studio calls GET /health, POST /setup and POST /predict (its ML
    backend protocol) and POST /webhook (annotations created, updated, deleted).
    Each delivery is stored raw at once and parsed in the background by the
    same code as `ls sync`; on start, deliveries left unparsed are parsed and one
    incremental `ls sync` catches up with anything missed, then again every
    --sync-every. Connect a project with `preflab ls connect URL`.

    The shared secret is PREFLAB_WEBHOOK_SECRET: webhooks send it in the
    X-Preflab-Secret header, the ML backend as its basic-auth password. Without
    it, serve listens on loopback only. SIGTERM or Ctrl-C lets requests in
    flight finish.

    Example: PREFLAB_WEBHOOK_SECRET=… preflab serve --host 0.0.0.0 --port 9090 --retrain-every 200
    """
    from preflab.server.run import serve

    serve(settings, build_config(ServeConfig, options))
