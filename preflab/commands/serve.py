"""`preflab serve`: Label Studio's ML backend and webhook receiver, with its background workers."""

from __future__ import annotations

import click

from preflab.commands.engine_options import engine_config, engine_options
from preflab.commands.options import build_config, config_options, pass_settings
from preflab.server.config import ServeConfig
from preflab.settings import Settings


@click.command("serve")
@config_options(ServeConfig, exclude=("engine",))
@engine_options
@click.option(
    "--model",
    "model_name",
    metavar="NAME",
    help="With --engine openai: the served model the judge runs on (default: --judge-model, else the "
    "global --model). In process: the judge's model, as --judge-model.",
)
@pass_settings
def serve_command(settings: Settings, model_name: str | None, **options):
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

    With --engine openai, the judge --judge names (pairwise, score, reference,
    likelihood) runs on an OpenAI-compatible server (--api-base, --model; the
    key from OPENAI_API_KEY), its answers stored as `preflab judge` stores them.

    Example: PREFLAB_WEBHOOK_SECRET=… preflab serve --host 0.0.0.0 --port 9090 --retrain-every 200
    """
    from preflab.server.run import serve

    judge_model = options.get("judge_model") or model_name
    engine = engine_config(options, model_name or judge_model or settings.model)
    if engine.served_model is None:  # in process --model names the judge's model, as --judge-model does
        engine, options["judge_model"] = None, judge_model
    serve(settings, build_config(ServeConfig, options, engine=engine))
