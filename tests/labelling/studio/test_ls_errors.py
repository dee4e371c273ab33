"""Label Studio down, a wrong or missing token, a server that comes back: one-line errors, nothing written."""

import contextlib
import json
import re
import socket
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from preflab.db.models import LSProject, LSTask
from tests.db.procs import dangling, rows
from tests.labelling.ls_fixtures import reserved_port
from tests.labelling.ls_helpers import (
    item,
    personal_access_token,
    ranker_result,
    record_backoff,
    session,
    tasks,
    unique,
    write_prompts,
)

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out


def written(sqlite_url: str) -> int:
    """Label Studio rows in the database (0 when the file was never created)."""
    if not Path(sqlite_url.removeprefix("sqlite:///")).exists():
        return 0
    with session(sqlite_url) as s:
        return sum(s.scalar(select(func.count()).select_from(t)) for t in (LSProject, LSTask))


def one_error_line(result) -> str:
    """The one error line; before it only the retries, said on stderr while they wait."""
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("Error: "), result.output
    assert all(line.startswith("retrying Label Studio at ") for line in lines[:-1]), result.output
    return lines[-1]


def test_unreachable_server(lcli, sqlite_url, monkeypatch):
    nobody = reserved_port()  # bound, never listening: connections are refused
    url = f"http://127.0.0.1:{nobody.getsockname()[1]}"
    monkeypatch.setenv("LABEL_STUDIO_URL", url)
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", "some-token-value")
    waits = record_backoff(monkeypatch)
    for args in (("ls", "init", "--title", "nowhere"), ("ls", "sync", "--project", "1")):
        waits.clear()
        result = lcli(*args, expect_ok=False)
        assert waits == [0.5, 1, 2, 4]  # doubling from half a second, four retries
        line = one_error_line(result)
        assert line.startswith(f"Error: cannot reach Label Studio at {url}") and "is it running?" in line
        assert "some-token-value" not in result.output
        # The wait is not silent: each retry is said on stderr, numbered.
        retries = [x for x in result.stderr.splitlines() if x.startswith("retrying")]
        assert [r.split("(attempt ")[1].split(")")[0] for r in retries] == ["2/5", "3/5", "4/5", "5/5"]
        assert all(r.startswith(f"retrying Label Studio at {url} in ") for r in retries)
    assert written(sqlite_url) == 0


def test_wrong_or_missing_token(lcli, sqlite_url, ls_server, monkeypatch, tmp_path):
    monkeypatch.setenv("LABEL_STUDIO_URL", ls_server.url)
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", "0123456789abcdef-not-the-token")
    lcli("import", "prompts", write_prompts(tmp_path / "p.jsonl", {unique("q"): [unique("a"), unique("b")]}))
    for args in (
        ("ls", "init", "--title", "wrong token"),
        ("ls", "push", "--project", "1"),
        ("ls", "sync", "--project", "1"),
    ):
        line = one_error_line(lcli(*args, expect_ok=False))
        assert "refused the token in LABEL_STUDIO_API_KEY (HTTP 401)" in line
        assert "not-the-token" not in line
    monkeypatch.delenv("LABEL_STUDIO_API_KEY")
    line = one_error_line(lcli("ls", "sync", "--project", "1", expect_ok=False))
    assert line == (
        "Error: no Label Studio token: set LABEL_STUDIO_API_KEY to a personal access token "
        "(My Account → Personal Access Token)"
    )
    assert written(sqlite_url) == 0


def test_a_personal_access_token_works_and_one_that_cannot_is_one_sentence(
    lcli, sqlite_url, ls_server, monkeypatch, tmp_path
):
    import jwt

    monkeypatch.setenv("LABEL_STUDIO_URL", ls_server.url)
    prompt = unique("Which is kinder?")
    lcli("import", "prompts", write_prompts(tmp_path / "p.jsonl", {prompt: [unique("yes"), unique("no")]}))
    token = personal_access_token(ls_server, f"pat-{len(ls_server.sdk().users.list())}@preflab.test")
    assert jwt.decode(token, options={"verify_signature": False})["token_type"] == "refresh"
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", token)  # what Label Studio 1.23 gives a user, legacy tokens off
    pid = json.loads(lcli("ls", "init", "--title", unique("pat"), "--json").stdout)["project_id"]
    lcli("ls", "push", "--project", pid)
    (task,) = tasks(sqlite_url)
    ls_server.sdk().annotations.create(task["id"], result=ranker_result({"rank": [item(c) for c in task["shown"]]}))
    assert json.loads(lcli("ls", "sync", "--project", pid, "--json").stdout)["new"] == 1

    # Revoked, or expired (the SDK reads its expiry before asking anything): one sentence each.
    ls_server.sdk().tokens.blacklist(refresh=token)
    revoked = lcli("ls", "sync", "--project", pid, expect_ok=False)
    assert "refused the token in LABEL_STUDIO_API_KEY (HTTP 401)" in one_error_line(revoked)
    expired = jwt.encode(
        {"token_type": "refresh", "exp": 1_000_000_000, "iat": 999_999_000, "jti": "0", "user_id": "1"},
        "a key that is not this server's, 32 bytes+",
        algorithm="HS256",
    )
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", expired)
    line = one_error_line(lcli("ls", "sync", "--project", pid, expect_ok=False))
    assert line == (
        "Error: the token in LABEL_STUDIO_API_KEY cannot be used (API key has expired. Please obtain "
        "a new refresh token): create a new one in Label Studio under My Account → Personal Access Token"
    )
    for result in (revoked,):
        assert token not in result.output


def shut(*sockets: socket.socket) -> None:
    for s in sockets:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)


def pipe(src: socket.socket, dst: socket.socket, cut=None) -> None:
    """Copy `src` to `dst` until either closes, or until `cut(data)` says the server is gone."""
    try:
        while data := src.recv(65536):
            if cut is not None and cut(data):
                return
            dst.sendall(data)
    except OSError:
        pass
    finally:
        shut(src, dst)


def forward_later(listener: socket.socket, target: tuple[str, int], delay: float) -> threading.Thread:
    """A TCP forwarder to `target` that starts listening on the bound socket `listener` only after
    `delay` seconds: a server restarting, as clients see it (connections refused, then accepted)."""

    def serve():
        time.sleep(delay)
        listener.listen()
        listener.settimeout(1.0)
        end = time.monotonic() + 120
        while time.monotonic() < end:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            upstream = socket.create_connection(target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_server_that_comes_back_is_retried(lcli, sqlite_url, ls_server, monkeypatch):
    listener = reserved_port()
    port = listener.getsockname()[1]
    host, target_port = ls_server.url.removeprefix("http://").split(":")
    forward_later(listener, (host, int(target_port)), delay=1.5)
    monkeypatch.setenv("LABEL_STUDIO_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", ls_server.token)
    project = json.loads(lcli("ls", "init", "--title", unique("comes back"), "--json").stdout)
    assert ls_server.sdk().projects.get(project["project_id"]).title.startswith("comes back")
    assert written(sqlite_url) == 1


class Proxy:
    """A TCP forwarder in front of Label Studio that can vanish as a killed server does, mid-sync.

    Armed with `cut_at(page)`, it waits for the client to ask for that page of a task list
    (the `page=N` of `GET /api/tasks`), then drops every connection and stops listening:
    the request in flight fails, and every one after is refused.
    """

    def __init__(self, target: tuple[str, int], port: int | None = None):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", port or 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.cut_page: int | None = None
        self.gone = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cut_at(self, page: int) -> None:
        self.cut_page = page

    def _serve(self) -> None:
        while not self.gone.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.sockets += [client, upstream]
            threading.Thread(target=pipe, args=(client, upstream, self._asks_the_cut_page), daemon=True).start()
            threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()

    def _asks_the_cut_page(self, data: bytes) -> bool:
        if self.cut_page and re.search(rb"GET /api/tasks/?\?\S*\bpage=%d\b" % self.cut_page, data):
            self.vanish()
            return True
        return False

    def vanish(self) -> None:
        self.gone.set()
        self.listener.close()
        shut(*self.sockets)


def test_label_studio_lost_mid_sync_keeps_whole_pages_and_a_second_sync_finishes(
    cli, db_url, ls_server, monkeypatch, tmp_path
):
    host, port = ls_server.url.removeprefix("http://").split(":")
    proxy = Proxy((host, int(port)))
    monkeypatch.setenv("LABEL_STUDIO_URL", proxy.url)
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", ls_server.token)
    prompts = {unique(f"Prompt {i}"): [unique(f"answer {i}.{j}") for j in range(3)] for i in range(12)}
    cli("import", "prompts", write_prompts(tmp_path / "p.jsonl", prompts))
    pid = json.loads(cli("ls", "init", "--title", unique("lost"), "--json").stdout)["project_id"]
    cli("ls", "push", "--project", pid)
    user = ls_server.signup(f"lou-{pid}@preflab.test")
    for task in tasks(db_url):
        a, b, c = task["shown"]
        ls_server.sdk().annotations.create(
            task["id"], completed_by=user, result=ranker_result({"rank": [item(b), item(c), item(a)]})
        )

    proxy.cut_at(page=3)  # pages 1 and 2 (4 tasks each) are read and stored; then the server is gone
    result = cli("ls", "sync", "--project", pid, "--page-size", "4", expect_ok=False)
    line = one_error_line(result)
    assert line.startswith(f"Error: cannot reach Label Studio at {proxy.url}")
    assert line.endswith("is it running? 8 rankings from 2 pages were stored; run `preflab ls sync` again to finish")
    assert len(rows(db_url, "SELECT id FROM rankings")) == 8
    assert dangling(db_url) == {}

    Proxy((host, int(port)), port=proxy.port)  # the server back, at the same address
    again = json.loads(cli("ls", "sync", "--project", pid, "--page-size", "4", "--json").stdout)
    assert (again["new"], again["unchanged"], again["deleted"]) == (4, 8, 0)
    assert len(rows(db_url, "SELECT id FROM rankings WHERE status = 'valid'")) == 12
