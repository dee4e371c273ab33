"""A thin wrapper over `label-studio-sdk` 2.x: retries, and one-line errors.

Every call goes through `LabelStudioClient.call`, which retries transient
failures (connection refused or reset, timeouts, HTTP 408/429/5xx) with
exponential backoff and turns what is left into a `LabelStudioError` a user can
act on. A request that may already have reached the server (a POST that timed
out) is not repeated, so a retry never creates a task twice. Each retry is
said on stderr (through the caller's Reporter), so a server that is down is
not a silent wait. The token comes
from LABEL_STUDIO_API_KEY only and appears in no message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from preflab.console import SILENT, Reporter
from preflab.errors import ConfigError, LabelStudioError
from preflab.settings import secret

T = TypeVar("T")

TOKEN_ENV = "LABEL_STUDIO_API_KEY"
# Where Label Studio (1.23) makes one. Legacy tokens are off by default there; the SDK
# exchanges a personal access token (a JWT) for short-lived access tokens by itself.
TOKEN_PAGE = "My Account → Personal Access Token"
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# Answers that say the request was not processed, so even a POST may be sent again.
NOT_PROCESSED_STATUS = frozenset({429, 503})
# Label Studio's SSRF guard (core/utils/io.py validate_ip, 1.23) refuses an ML backend or webhook URL
# on loopback or a private network with HTTP 403 and this text; one server setting lifts it.
RESERVED_ADDRESS = "URL resolves to a reserved network address"


def _detail(body: Any, limit: int = 300) -> str:
    """The reason inside a Label Studio error body, on one line (at most `limit` characters)."""
    if isinstance(body, dict):
        errors = body.get("validation_errors")
        if isinstance(errors, dict) and errors:
            parts = []
            for field, messages in errors.items():
                text = "; ".join(map(str, messages)) if isinstance(messages, list) else str(messages)
                parts.append(f"{field}: {text}")
            return " ".join(" | ".join(parts).split())[:limit]
        for key in ("detail", "message", "error"):
            if body.get(key):
                return " ".join(str(body[key]).split())[:limit]
    if isinstance(body, str) and body.strip():
        return " ".join(body.split())[:200]
    return ""


def _ml_refusal(detail: str) -> str | None:
    """What Label Studio's check of a new ML backend found (ml/serializers.py, 1.23), said plainly."""
    if "authentication parameters were either not provided or are incorrect" in detail:
        return (
            "the ML backend answered 401 to Label Studio's health check with the basic-auth password sent" + SAME_SECRET
        )
    if "health check failed" in detail:
        info = detail.split("Additional info:", 1)[1].strip() if "Additional info:" in detail else ""
        if _refused_auth(info):
            return f"the ML backend refused the basic-auth password sent to GET /health ({info[:80]}){SAME_SECRET}"
        return (
            "Label Studio could not reach the ML backend (GET /health failed"
            + (f": {info[:160]}" if info else "")
            + "); is it running, and reachable from the Label Studio "
            "server?"
        )
    if "doesn't look like a valid ML backend" in detail:
        reason = detail.split("Reason:", 1)[1].split(". Check", 1)[0].strip() if "Reason:" in detail else ""
        why = f" ({reason[:160]})" if reason else ""
        return f"the ML backend answered GET /health but its POST /setup failed{why}" + (
            SAME_SECRET if _refused_auth(reason) else ""
        )
    return None


SAME_SECRET = "; is it running with the same secret?"


def _refused_auth(text: str) -> bool:
    """A requests error text that says 401 or 403 (how Label Studio reports a backend's refusal)."""
    return any(f"{code} Client Error" in text for code in (401, 403))


class LabelStudioClient:
    """A Label Studio server at `base_url`, driven through the SDK."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 60.0,
        retries: int = 4,
        backoff: float = 0.5,
        reporter: Reporter = SILENT,
    ):
        from label_studio_sdk import LabelStudio
        from label_studio_sdk.core.api_error import ApiError

        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.backoff = backoff
        self.reporter = reporter
        try:
            # The SDK's own retries are off: `call` owns them, so it can refuse to repeat a POST.
            self.sdk = LabelStudio(base_url=self.base_url, api_key=token, timeout=timeout, max_retries=0)
        except ApiError as exc:  # a personal access token (a JWT) is read before any request: expired
            raise LabelStudioError(
                f"the token in {TOKEN_ENV} cannot be used ({_detail(exc.body).rstrip('.')}): "
                f"create a new one in Label Studio under {TOKEN_PAGE}"
            ) from None

    @classmethod
    def connect(cls, base_url: str | None, **kwargs) -> LabelStudioClient:
        """A client for `base_url` with the token from LABEL_STUDIO_API_KEY, checked with one request."""
        if not base_url:
            raise ConfigError("no Label Studio URL: set LABEL_STUDIO_URL or pass --label-studio-url")
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"the Label Studio URL {base_url!r} must start with http:// or https://")
        token = secret(TOKEN_ENV)
        if not token:
            raise ConfigError(f"no Label Studio token: set {TOKEN_ENV} to a personal access token ({TOKEN_PAGE})")
        client = cls(base_url, token, **kwargs)
        client.whoami()
        return client

    # --- the one place requests are made -------------------------------------------------

    def call(self, what: str, fn: Callable[..., T], *args, idempotent: bool = True, **kwargs) -> T:
        """Run one SDK call; retry transient failures; raise LabelStudioError for the rest.

        Args:
            what: what the call does, for messages ("create the project").
            idempotent: False for requests that must not run twice (creating things).
        """
        import httpx
        from label_studio_sdk.core.api_error import ApiError

        attempt = 0
        while True:
            try:
                return fn(*args, **kwargs)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                # Nothing reached the server: safe to repeat any request.
                if attempt >= self.retries:
                    raise LabelStudioError(
                        f"cannot reach Label Studio at {self.base_url} ({_reason(exc)}); is it running?"
                    ) from None
                why = _reason(exc)
            except httpx.TransportError as exc:
                if not idempotent or attempt >= self.retries:
                    raise LabelStudioError(
                        f"lost the connection to Label Studio at {self.base_url} while trying to {what} "
                        f"({_reason(exc)})"
                    ) from None
                why = _reason(exc)
            except ApiError as exc:
                status = exc.status_code or 0
                retry = status in (TRANSIENT_STATUS if idempotent else NOT_PROCESSED_STATUS)
                if not retry or attempt >= self.retries:
                    error = self._api_error(what, status, exc.body)
                    error.status = status
                    raise error from None
                why = f"HTTP {status}"
            delay = self.backoff * 2**attempt
            attempt += 1
            self.reporter.note(
                f"retrying Label Studio at {self.base_url} in {delay:g}s "
                f"(attempt {attempt + 1}/{self.retries + 1}): {why}…"
            )
            time.sleep(delay)

    def _api_error(self, what: str, status: int, body: Any) -> LabelStudioError:
        detail = _detail(body)
        if status == 401:
            return LabelStudioError(
                f"Label Studio at {self.base_url} refused the token in {TOKEN_ENV} "
                "(HTTP 401): check that it is a personal access token of this server, "
                "and not revoked"
            )
        if status == 403 and RESERVED_ADDRESS in detail:
            block = detail.split("(block:", 1)[1].split(")", 1)[0].strip() if "(block:" in detail else ""
            return LabelStudioError(
                f"Label Studio at {self.base_url} refused to {what}: the URL resolves to a reserved network address"
                + (f" ({block})" if block else "")
                + " (HTTP 403); to let it reach loopback or a private network, "
                "set USE_DEFAULT_BANNED_SUBNETS=false on the Label Studio server (and keep that address out of "
                "USER_ADDITIONAL_BANNED_SUBNETS)"
            )
        if status == 403:
            return LabelStudioError(f"Label Studio at {self.base_url} does not allow this token to {what} (HTTP 403)")
        if status == 404:
            return LabelStudioError(f"Label Studio at {self.base_url} could not {what}: not found (HTTP 404)")
        if status == 400 and (refusal := _ml_refusal(_detail(body, 2000))):
            return LabelStudioError(f"Label Studio at {self.base_url} could not {what}: {refusal}")
        suffix = f": {detail}" if detail else ""
        return LabelStudioError(f"Label Studio at {self.base_url} could not {what} (HTTP {status}){suffix}")

    # --- what preflab asks of Label Studio ----------------------------------------------

    def whoami(self) -> Any:
        return self.call("check the token", self.sdk.users.whoami)

    def create_project(self, **settings) -> Any:
        return self.call("create the project", self.sdk.projects.create, idempotent=False, **settings)

    def get_project(self, project_id: int) -> Any:
        return self.call(f"find project {project_id}", self.sdk.projects.get, project_id)

    def delete_project(self, project_id: int) -> None:
        self.call(f"delete project {project_id}", self.sdk.projects.delete, project_id)

    def import_tasks(self, project_id: int, tasks: list[dict]) -> list[int]:
        """Create tasks; returns their ids in the order given."""
        response = self.call(
            f"import tasks into project {project_id}",
            self.sdk.projects.import_tasks,
            project_id,
            request=tasks,
            return_task_ids=True,
            idempotent=False,
        )
        ids = list(response.task_ids or [])
        if len(ids) != len(tasks):
            raise LabelStudioError(f"Label Studio at {self.base_url} created {len(ids)} tasks for {len(tasks)} sent")
        return ids

    def iter_task_pages(self, project_id: int, page_size: int = 100, fields: str = "all") -> Iterator[list[dict]]:
        """Every task of a project, a page at a time, as dicts (annotations as Label Studio sent them)."""
        page = 1
        while True:
            pager = self.call(
                f"list the tasks of project {project_id}",
                self.sdk.tasks.list,
                project=project_id,
                fields=fields,
                page=page,
                page_size=page_size,
            )
            tasks = list(pager.items or [])
            yield [
                {
                    "id": t.id,
                    "project": getattr(t, "project", None) or project_id,
                    "data": t.data,
                    "annotations": list(getattr(t, "annotations", None) or []),
                }
                for t in tasks
            ]
            total = getattr(pager.response, "total", None)
            if not tasks or total is None or page * page_size >= total:
                return
            page += 1

    def annotation_exists(self, annotation_id: int) -> bool:
        try:
            self.call(f"read annotation {annotation_id}", self.sdk.annotations.get, annotation_id)
        except LabelStudioError as exc:
            if getattr(exc, "status", None) == 404:
                return False
            raise
        return True

    def users(self) -> dict[int, str]:
        """Label Studio user id -> email."""
        return {u.id: u.email for u in self.call("list the users", self.sdk.users.list)}

    def predictions(self, project_id: int) -> list[Any]:
        return list(
            self.call(f"list the predictions of project {project_id}", self.sdk.predictions.list, project=project_id)
        )

    def import_predictions(self, project_id: int, predictions: list[dict]) -> int | None:
        """Upload predictions; returns how many Label Studio says it created (None if it does not say).

        Label Studio drops a prediction that does not fit the project's labelling
        config and still answers 201, so only this count says what was stored.
        """
        response = self.call(
            f"upload predictions to project {project_id}",
            self.sdk.projects.import_predictions,
            project_id,
            request=predictions,
            idempotent=False,
        )
        created = getattr(response, "created", None)
        return created if isinstance(created, int) else None

    # --- ML backends and webhooks (`ls connect`) --------------------------------------------

    def ml_backends(self, project_id: int) -> list[Any]:
        return list(self.call(f"list the ML backends of project {project_id}", self.sdk.ml.list, project=project_id))

    def create_ml_backend(self, project_id: int, url: str, **settings) -> Any:
        """Connect an ML backend; Label Studio calls its /health and /setup before it answers."""
        return self.call(
            f"connect the ML backend {url} to project {project_id}",
            self.sdk.ml.create,
            project=project_id,
            url=url,
            idempotent=False,
            **settings,
        )

    def update_ml_backend(self, backend_id: int, project_id: int, url: str, **settings) -> Any:
        # Label Studio checks /health and /setup again with the fields sent: url and project go every time.
        return self.call(
            f"update ML backend {backend_id} ({url})",
            self.sdk.ml.update,
            backend_id,
            project=project_id,
            url=url,
            **settings,
        )

    def delete_ml_backend(self, backend_id: int) -> None:
        self.call(f"remove ML backend {backend_id}", self.sdk.ml.delete, backend_id)

    def webhooks(self, project_id: int | None = None) -> list[Any]:
        """The organization's webhooks: those of one project (with `project_id`), or all, project-wide ones too."""
        if project_id is None:
            return list(self.call("list the webhooks", self.sdk.webhooks.list))
        return list(
            self.call(f"list the webhooks of project {project_id}", self.sdk.webhooks.list, project=str(project_id))
        )

    def create_webhook(self, project_id: int, url: str, **settings) -> Any:
        return self.call(
            f"create the webhook {url} for project {project_id}",
            self.sdk.webhooks.create,
            project=project_id,
            url=url,
            idempotent=False,
            **settings,
        )

    def update_webhook(self, webhook_id: int, url: str, **settings) -> Any:
        return self.call(
            f"update webhook {webhook_id} ({url})", self.sdk.webhooks.update, webhook_id, url=url, **settings
        )

    def delete_webhook(self, webhook_id: int) -> None:
        self.call(f"remove webhook {webhook_id}", self.sdk.webhooks.delete, webhook_id)


def _reason(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text[:120] if text else type(exc).__name__
