"""`ls connect`: make `preflab serve` a Label Studio project's ML backend and its annotation webhook.

What Label Studio 1.23 does, read in its code:
- Connecting an ML backend (`POST /api/ml`, ml/serializers.py) calls the backend's `GET /health` and
  `POST /setup` (ml/api_connector.py) with the basic-auth user and password given, and refuses it (400)
  when either fails; the password is write-only from then on.
- Creating one also creates a webhook to `<url>/webhook` for all actions and with no headers (ml/models.py
  `create_ml_webhook`), unless the project already has a webhook at exactly that URL. So the backend is
  connected first (Label Studio tries the secret on /health and /setup before anything changes), then
  preflab owns that webhook: the secret header and the annotation events, and no second one beside it,
  so no delivery arrives twice or without the secret.
- An ML backend or webhook URL on loopback or a private network is refused with 403 unless the Label
  Studio server runs with USE_DEFAULT_BANNED_SUBNETS=false (core/utils/io.py `validate_ip`); the client
  turns that answer into one line naming the setting.

The secret (PREFLAB_WEBHOOK_SECRET) goes to Label Studio twice, as the basic-auth password of the ML
backend and in the webhook's `X-Preflab-Secret` header, and nowhere else: not in a message, a log line
or the database.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.orm import Session, sessionmaker

from preflab.errors import ConfigError, InputError, LabelStudioError
from preflab.labelling.studio.client import LabelStudioClient
from preflab.labelling.studio.projects import ProjectInfo, find_project
from preflab.labelling.studio.webhooks import EVENTS
from preflab.settings import secret

SECRET_ENV = "PREFLAB_WEBHOOK_SECRET"
SECRET_HEADER = "X-Preflab-Secret"
BASIC_AUTH_USER = "preflab"  # the ML backend's basic-auth user; the password is the secret
BACKEND_TITLE = "preflab"  # how a re-run finds its ML backend after the URL changed
WEBHOOK_PATH = "/webhook"


@dataclass
class Connection:
    """What `ls connect` left in Label Studio: ids and what was done, never the secret."""

    project: ProjectInfo
    url: str | None
    ml_backend: int | None = None
    webhook: int | None = None
    actions: dict[str, str] = field(default_factory=dict)  # "ml_backend"/"webhook" -> created/updated
    model_version: str | None = None
    state: str | None = None
    removed: dict[str, list[int]] = field(default_factory=lambda: {"ml_backends": [], "webhooks": []})
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        data: dict[str, Any] = {
            "project": self.project.project_id,
            "url": self.url,
            "removed": self.removed,
            "warnings": self.warnings,
        }
        if self.ml_backend is not None:
            data["ml_backend"] = {
                "id": self.ml_backend,
                "action": self.actions.get("ml_backend"),
                "state": self.state,
                "model_version": self.model_version,
            }
        if self.webhook is not None:
            data["webhook"] = {
                "id": self.webhook,
                "action": self.actions.get("webhook"),
                "url": webhook_url(self.url) if self.url else None,
                "events": sorted(EVENTS),
            }
        return data

    def line(self) -> str:
        pid = self.project.project_id
        if self.ml_backend is None:
            backends, hooks = len(self.removed["ml_backends"]), len(self.removed["webhooks"])
            if not backends and not hooks:
                return f"project {pid} had no preflab ML backend or webhook: nothing to remove"
            return (
                f"removed from project {pid}: {backends} ML backend{'s' * (backends != 1)}, "
                f"{hooks} webhook{'s' * (hooks != 1)}"
            )
        version = f", model_version {self.model_version}" if self.model_version else ""
        extra = (
            f"; removed {len(self.removed['ml_backends']) + len(self.removed['webhooks'])} duplicate(s)"
            if self.removed["ml_backends"] or self.removed["webhooks"]
            else ""
        )
        return (
            f"connected project {pid} to {self.url}: ML backend {self.ml_backend} {self.actions['ml_backend']} "
            f"({self.state or 'state unknown'}{version}), webhook {self.webhook} {self.actions['webhook']} "
            f"({len(EVENTS)} annotation events, secret in {SECRET_HEADER}){extra}"
        )


def backend_url(url: str) -> str:
    """The ML backend's URL as Label Studio is given it: http(s), a host, no trailing slash."""
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(
            f"the server URL {url!r} must start with http:// or https:// and name a host "
            "(where `preflab serve` listens, as the Label Studio server reaches it)"
        )
    if parts.query or parts.fragment:
        raise InputError(f"the server URL {url!r} must not carry a query or a fragment")
    return url


def webhook_url(url: str) -> str:
    # Exactly what Label Studio computes in create_ml_webhook: url.rstrip('/') + '/webhook'.
    return url.rstrip("/") + WEBHOOK_PATH


def _same(a: str | None, b: str) -> bool:
    return (a or "").rstrip("/") == b.rstrip("/")


def _has_header(hook: Any) -> bool:
    return any(str(k).lower() == SECRET_HEADER.lower() for k in (getattr(hook, "headers", None) or {}))


def _ours(client: LabelStudioClient, project_id: int, url: str | None) -> tuple[list[Any], list[Any], list[str]]:
    """preflab's ML backends and webhooks on the project (oldest first), and warnings about the others."""
    backends, warnings = [], []
    for backend in sorted(client.ml_backends(project_id), key=lambda b: b.id):
        if backend.title == BACKEND_TITLE or (url and _same(backend.url, url)):
            backends.append(backend)
        elif url:
            warnings.append(
                f"the project also has ML backend {backend.id} ({backend.url}); Label Studio may ask "
                "it instead of preflab: remove it in the project's Model settings"
            )
    hooks = _our_hooks(client, project_id, url, warnings)
    return backends, hooks, warnings


def _our_hooks(client: LabelStudioClient, project_id: int, url: str | None, warnings: list[str]) -> list[Any]:
    hooks = []
    for hook in sorted(client.webhooks(), key=lambda h: h.id):
        at_url = bool(url) and _same(hook.url, webhook_url(url))
        if hook.project == project_id and (at_url or _has_header(hook)):
            hooks.append(hook)
        elif hook.project is None and at_url:
            warnings.append(
                f"webhook {hook.id} of the whole organization also posts to {hook.url}: each delivery "
                "would arrive twice; remove it in Label Studio"
            )
    return hooks


def connect_project(
    sessions: sessionmaker[Session],
    client: LabelStudioClient,
    url: str | None,
    project_id: int | None,
    *,
    remove: bool = False,
) -> Connection:
    """The `ls connect` job: register `url` as the project's ML backend and annotation webhook, or remove both.

    Re-running updates the ML backend and the webhook preflab made (found by URL, by the backend's
    title, by the webhook's secret header), and removes any duplicate, so a project holds one of each.

    Args:
        url: where `preflab serve` listens, as the Label Studio server reaches it (optional with `remove`).
        project_id: the Label Studio project (default: the only one preflab knows on the server).
        remove: take preflab's ML backend and webhook off the project instead.
    """
    url = backend_url(url) if url else None
    password = None
    if not remove:
        if not url:
            raise InputError("name the URL where `preflab serve` listens (or pass --remove)")
        password = secret(SECRET_ENV)
        if not password:
            raise ConfigError(f"no webhook secret: set {SECRET_ENV} to the secret `preflab serve` runs with")
        if not (password.isascii() and password.isprintable()):
            # It travels in an HTTP header and as a basic-auth password: Label Studio could not send it.
            raise ConfigError(f"{SECRET_ENV} must be printable ASCII (it is sent in HTTP headers)")
    with sessions() as session:
        project = find_project(session, client.base_url, project_id)
    connection = Connection(project, url)
    backends, hooks, warnings = _ours(client, project.project_id, url)
    if remove:
        for backend in backends:
            client.delete_ml_backend(backend.id)
            connection.removed["ml_backends"].append(backend.id)
        for hook in hooks:
            client.delete_webhook(hook.id)
            connection.removed["webhooks"].append(hook.id)
        return connection
    connection.warnings = warnings
    # The backend first: Label Studio checks the secret against the server before anything changes.
    backend = _own_ml_backend(client, connection, backends, password)
    connection.state, connection.model_version = backend.readable_state, backend.model_version or None
    made_here = []
    if connection.actions["ml_backend"] == "created":
        # Label Studio has just added its own webhook to <url>/webhook (all actions, no secret): preflab's to own.
        known = {hook.id for hook in hooks}
        hooks = _our_hooks(client, project.project_id, url, [])
        made_here = [hook.id for hook in hooks if hook.id not in known]
    try:
        made_here += _own_webhook(client, connection, hooks, password)
    except LabelStudioError:
        if connection.actions["ml_backend"] == "created":  # no half-made connection left behind
            with suppress(LabelStudioError):
                client.delete_ml_backend(backend.id)
                for hook_id in made_here:
                    client.delete_webhook(hook_id)
        raise
    if connection.webhook in made_here:  # Label Studio's own, made a moment ago: new to the user
        connection.actions["webhook"] = "created"
    return connection


def _own_webhook(client: LabelStudioClient, connection: Connection, hooks: list[Any], password: str) -> list[int]:
    """Update preflab's webhook (the oldest of `hooks`) or create it, and remove the others.

    Returns the id of the webhook when this run created it.
    """
    settings = {"actions": sorted(EVENTS), "send_payload": True, "send_for_all_actions": False, "is_active": True}
    url = webhook_url(connection.url)
    created = []
    if hooks:
        keep = hooks[0]
        # Headers someone added by hand stay; only the secret's is replaced.
        headers = {k: v for k, v in (keep.headers or {}).items() if str(k).lower() != SECRET_HEADER.lower()}
        client.update_webhook(keep.id, url, headers=headers | {SECRET_HEADER: password}, **settings)
        connection.webhook, connection.actions["webhook"] = keep.id, "updated"
    else:
        hook = client.create_webhook(connection.project.project_id, url, headers={SECRET_HEADER: password}, **settings)
        connection.webhook, connection.actions["webhook"] = hook.id, "created"
        created.append(hook.id)
    for extra in hooks[1:]:
        client.delete_webhook(extra.id)
        connection.removed["webhooks"].append(extra.id)
    return created


def _own_ml_backend(client: LabelStudioClient, connection: Connection, backends: list[Any], password: str) -> Any:
    settings = {
        "title": BACKEND_TITLE,
        "auth_method": "BASIC_AUTH",
        "basic_auth_user": BASIC_AUTH_USER,
        "basic_auth_pass": password,
        "is_interactive": False,
        "description": "preflab serve: AI rankings as predictions (`preflab ls connect`)",
    }
    pid = connection.project.project_id
    if backends:
        backend = client.update_ml_backend(backends[0].id, pid, connection.url, **settings)
        connection.actions["ml_backend"] = "updated"
    else:
        backend = client.create_ml_backend(pid, connection.url, **settings)
        connection.actions["ml_backend"] = "created"
    connection.ml_backend = backend.id
    for extra in backends[1:]:
        client.delete_ml_backend(extra.id)
        connection.removed["ml_backends"].append(extra.id)
    return backend
