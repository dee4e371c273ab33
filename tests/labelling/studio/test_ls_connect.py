"""`preflab ls connect`: one ML backend with basic auth and one webhook with the secret, against the real Label Studio.

Label Studio calls the backend's /health and /setup while connecting it, so a stand-in answers them here:
a small HTTP server in a thread, speaking the ML backend protocol as Label Studio 1.23 calls it
(`preflab serve` itself is tested in tests/server/). It also receives the webhook deliveries, so the tests
see what Label Studio really sends, and how many times.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from preflab.labelling.studio.client import LabelStudioClient
from preflab.labelling.studio.connect import BASIC_AUTH_USER, SECRET_ENV, SECRET_HEADER
from preflab.labelling.studio.webhooks import EVENTS
from tests.labelling.ls_fixtures import BANNED_SUBNET, reserved_port
from tests.labelling.ls_helpers import unique, write_prompts


class StandIn:
    """An ML backend and webhook receiver on loopback that checks the secret and records what came.

    It keeps no secret and no body: only the method, the path, whether the secret was right,
    the webhook's action, and the names of /setup's fields.
    """

    def __init__(self, secret: str | None, model_version: str = "stand-in-1"):
        self.secret, self.model_version, self.seen, self.setup_projects = secret, model_version, [], []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _answer(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _basic_ok(self) -> bool:
                expected = base64.b64encode(f"{BASIC_AUTH_USER}:{stand_in.secret}".encode()).decode()
                return stand_in.secret is None or self.headers.get("Authorization") == f"Basic {expected}"

            def do_GET(self):
                ok = self._basic_ok()
                stand_in.seen.append(("GET", self.path, ok, None))
                self._answer(200 if ok else 401, {"status": "UP"} if ok else {"error": "unauthorized"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path == "/webhook":
                    ok = stand_in.secret is None or self.headers.get(SECRET_HEADER) == stand_in.secret
                    stand_in.seen.append(("POST", self.path, ok, body.get("action")))
                    self._answer(200 if ok else 401, {})
                    return
                ok = self._basic_ok()
                stand_in.seen.append(("POST", self.path, ok, sorted(body)))
                if self.path == "/setup":
                    stand_in.setup_projects.append(body.get("project"))
                self._answer(200 if ok else 401, {"model_version": stand_in.model_version} if ok else {})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def deliveries(self) -> list[tuple[str, bool]]:
        return [(action, ok) for method, path, ok, action in self.seen if path == "/webhook"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stand_in():
    servers = []

    def start(secret, model_version="stand-in-1"):
        servers.append(StandIn(secret, model_version))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def project(lcli, ls_env, monkeypatch):
    """A fresh Label Studio project preflab knows (the server is shared by the whole run)."""
    monkeypatch.delenv(SECRET_ENV, raising=False)
    return json.loads(lcli("ls", "init", "--title", unique("connect"), "--json").stdout)["project_id"]


def registered(ls_env, pid: int) -> tuple[list, list]:
    sdk = ls_env.sdk()
    return list(sdk.ml.list(project=pid)), list(sdk.webhooks.list(project=str(pid)))


def annotate(lcli, ls_env, pid: int, tmp_path) -> None:
    """One task pushed by preflab and one annotation made on it through Label Studio's API."""
    lcli("import", "prompts", write_prompts(tmp_path / f"p{pid}.jsonl", {unique("q"): [unique("a"), unique("b")]}))
    lcli("ls", "push", "--project", pid)
    sdk = ls_env.sdk()
    task = next(iter(sdk.tasks.list(project=pid)))
    sdk.annotations.create(task.id, result=[])


def test_connect_owns_one_backend_and_one_webhook_and_rerunning_or_removing_duplicates_nothing(
    lcli, ls_env, project, stand_in, monkeypatch, tmp_path
):
    first = stand_in("first-secret")
    monkeypatch.setenv(SECRET_ENV, "first-secret")
    out = json.loads(lcli("ls", "connect", first.url, "--project", project, "--json").stdout)
    assert out["ml_backend"]["action"] == "created" and out["webhook"]["action"] == "created"
    assert out["ml_backend"]["model_version"] == "stand-in-1" and out["ml_backend"]["state"] == "Connected"
    assert "first-secret" not in json.dumps(out)

    backends, hooks = registered(ls_env, project)
    assert [(b.url, b.auth_method, b.basic_auth_user, b.basic_auth_pass_is_set) for b in backends] == [
        (first.url, "BASIC_AUTH", BASIC_AUTH_USER, True)
    ]
    assert [
        (h.url, h.headers, sorted(h.actions), h.send_payload, h.send_for_all_actions, h.is_active) for h in hooks
    ] == [(f"{first.url}/webhook", {SECRET_HEADER: "first-secret"}, sorted(EVENTS), True, False, True)]
    # Label Studio checked the backend with the secret as the basic-auth password, and set it up.
    assert ("GET", "/health", True, None) in first.seen
    assert ("POST", "/setup", True, ["access_token", "extra_params", "hostname", "project", "schema"]) in first.seen
    assert all(ok for _, _, ok, _ in first.seen)
    assert all(re.fullmatch(rf"{project}\.\d+", p) for p in first.setup_projects)  # "<id>.<created timestamp>"

    # A submitted annotation is delivered once, with the secret, and pushing tasks sends nothing.
    annotate(lcli, ls_env, project, tmp_path)
    assert first.deliveries() == [("ANNOTATION_CREATED", True)]

    # Again, with a new secret and the server moved: the same two are updated, nothing is added.
    second = stand_in("second-secret", "stand-in-2")
    monkeypatch.setenv(SECRET_ENV, "second-secret")
    again = lcli("ls", "connect", second.url, "--project", project)
    assert again.stdout.startswith(
        f"connected project {project} to {second.url}: ML backend "
        f"{out['ml_backend']['id']} updated (Connected, model_version stand-in-2), "
        f"webhook {out['webhook']['id']} updated"
    )
    assert "second-secret" not in again.output
    backends, hooks = registered(ls_env, project)
    assert [(b.id, b.url) for b in backends] == [(out["ml_backend"]["id"], second.url)]
    assert [(h.id, h.url, h.headers) for h in hooks] == [
        (out["webhook"]["id"], f"{second.url}/webhook", {SECRET_HEADER: "second-secret"})
    ]
    assert ("POST", "/setup", True, ["access_token", "extra_params", "hostname", "project", "schema"]) in second.seen
    assert (
        json.loads(lcli("ls", "connect", second.url, "--project", project, "--json").stdout)["ml_backend"]["action"]
        == "updated"
    )
    assert [len(x) for x in registered(ls_env, project)] == [1, 1]

    # --remove takes both off (no secret needed), and a second --remove finds nothing.
    monkeypatch.delenv(SECRET_ENV)
    removed = json.loads(lcli("ls", "connect", "--remove", "--project", project, "--json").stdout)
    assert removed["removed"] == {"ml_backends": [out["ml_backend"]["id"]], "webhooks": [out["webhook"]["id"]]}
    assert registered(ls_env, project) == ([], [])
    assert lcli("ls", "connect", "--remove", "--project", project).stdout.strip() == (
        f"project {project} had no preflab ML backend or webhook: nothing to remove"
    )


def test_the_webhook_label_studio_made_for_a_backend_connected_in_its_ui_is_adopted(
    lcli, ls_env, project, stand_in, monkeypatch, tmp_path
):
    server = stand_in(None)  # as a user might first connect it by hand: no auth
    sdk = ls_env.sdk()
    sdk.ml.create(project=project, url=server.url + "/")  # Label Studio adds a webhook for all actions, no headers
    backends, hooks = registered(ls_env, project)
    assert [(h.url, h.headers, h.send_for_all_actions) for h in hooks] == [(f"{server.url}/webhook", {}, True)]

    server.secret = "the-secret"
    monkeypatch.setenv(SECRET_ENV, "the-secret")
    out = json.loads(lcli("ls", "connect", server.url + "/", "--project", project, "--json").stdout)
    assert (out["ml_backend"]["id"], out["webhook"]["id"]) == (backends[0].id, hooks[0].id)
    assert (out["ml_backend"]["action"], out["webhook"]["action"]) == ("updated", "updated")
    backends, hooks = registered(ls_env, project)
    assert [(b.url, b.auth_method) for b in backends] == [(server.url, "BASIC_AUTH")]
    assert [(h.headers, sorted(h.actions), h.send_for_all_actions) for h in hooks] == [
        ({SECRET_HEADER: "the-secret"}, sorted(EVENTS), False)
    ]
    annotate(lcli, ls_env, project, tmp_path)
    assert server.deliveries() == [("ANNOTATION_CREATED", True)]


def one_error_line(result) -> str:
    assert result.exit_code == 1, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    return result.output.strip()


def test_no_secret_no_server_or_a_refused_address_is_one_line_and_registers_nothing(
    lcli, ls_env, project, stand_in, monkeypatch
):
    server = stand_in("s3cret-value")
    line = one_error_line(lcli("ls", "connect", server.url, "--project", project, expect_ok=False))
    assert line == f"Error: no webhook secret: set {SECRET_ENV} to the secret `preflab serve` runs with"
    assert server.seen == [] and registered(ls_env, project) == ([], [])
    monkeypatch.setenv(SECRET_ENV, "caf\u00e9-secret")
    line = one_error_line(lcli("ls", "connect", server.url, "--project", project, expect_ok=False))
    assert line == f"Error: {SECRET_ENV} must be printable ASCII (it is sent in HTTP headers)"

    monkeypatch.setenv(SECRET_ENV, "s3cret-value")
    nobody = reserved_port()  # bound, never listening
    url = f"http://127.0.0.1:{nobody.getsockname()[1]}"
    line = one_error_line(lcli("ls", "connect", url, "--project", project, expect_ok=False))
    assert line.startswith(
        f"Error: Label Studio at {ls_env.url} could not connect the ML backend {url} to project "
        f"{project}: Label Studio could not reach the ML backend (GET /health failed"
    )
    assert "is it running, and reachable from the Label Studio server?" in line and "<a" not in line
    assert registered(ls_env, project) == ([], [])

    monkeypatch.setenv(SECRET_ENV, "wrong")
    line = one_error_line(lcli("ls", "connect", server.url, "--project", project, expect_ok=False))
    assert "answered 401 to Label Studio's health check" in line and "wrong" not in line
    assert registered(ls_env, project) == ([], [])

    # The test server bans one documentation subnet, as USER_ADDITIONAL_BANNED_SUBNETS lets an admin do.
    banned = f"http://{BANNED_SUBNET.split('/')[0][:-1]}1:9090"
    line = one_error_line(lcli("ls", "connect", banned, "--project", project, expect_ok=False))
    assert line == (
        f"Error: Label Studio at {ls_env.url} refused to connect the ML backend {banned} to project "
        f"{project}: the URL resolves to a reserved network address ({BANNED_SUBNET}) (HTTP 403); to let "
        "it reach loopback or a private network, set USE_DEFAULT_BANNED_SUBNETS=false on the Label Studio "
        "server (and keep that address out of USER_ADDITIONAL_BANNED_SUBNETS)"
    )
    assert registered(ls_env, project) == ([], [])


def test_label_studios_refusal_of_a_loopback_address_names_the_setting():
    """What Label Studio 1.23 answers by default to an ML backend on loopback (its SSRF guard), mapped to one line."""
    from label_studio_sdk.core.api_error import ApiError

    body = {
        "id": "0b7e0a57-5bd4-4f2e-9c1e-2c0f8f0a1d11",
        "status_code": 403,
        "version": "1.23.2",
        "detail": "URL resolves to a reserved network address (block: 127.0.0.0/8)",
        "exc_info": None,
    }

    def refuse():
        raise ApiError(status_code=403, body=body)

    client = LabelStudioClient("http://ls.example:8080", "a-token", retries=0)
    with pytest.raises(Exception) as caught:
        client.call("connect the ML backend http://127.0.0.1:9090 to project 3", refuse, idempotent=False)
    assert str(caught.value) == (
        "Label Studio at http://ls.example:8080 refused to connect the ML backend http://127.0.0.1:9090 to project 3: "
        "the URL resolves to a reserved network address (127.0.0.0/8) (HTTP 403); to let it reach loopback or a "
        "private network, set USE_DEFAULT_BANNED_SUBNETS=false on the Label Studio server (and keep that address "
        "out of USER_ADDITIONAL_BANNED_SUBNETS)"
    )
    assert caught.value.status == 403
