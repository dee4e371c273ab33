"""Label Studio down, a wrong or missing token, a server that comes back: one-line errors, nothing written."""

import json
import socket
import threading
import time
from pathlib import Path

from sqlalchemy import func, select

from preflab.db.models import LSProject, LSTask
from tests.labelling.ls_fixtures import reserved_port
from tests.labelling.ls_helpers import session, unique, write_prompts


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
    for args in (("ls", "init", "--title", "nowhere"), ("ls", "sync", "--project", "1")):
        result = lcli(*args, expect_ok=False)
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
    for args in (("ls", "init", "--title", "wrong token"), ("ls", "push", "--project", "1"),
                 ("ls", "sync", "--project", "1")):
        line = one_error_line(lcli(*args, expect_ok=False))
        assert "refused the token in LABEL_STUDIO_API_KEY (HTTP 401)" in line
        assert "not-the-token" not in line
    monkeypatch.delenv("LABEL_STUDIO_API_KEY")
    line = one_error_line(lcli("ls", "sync", "--project", "1", expect_ok=False))
    assert line == "Error: no Label Studio token: set LABEL_STUDIO_API_KEY (Account & Settings → Access Token)"
    assert written(sqlite_url) == 0


def forward_later(listener: socket.socket, target: tuple[str, int], delay: float) -> threading.Thread:
    """A TCP forwarder to `target` that starts listening on the bound socket `listener` only after
    `delay` seconds: a server restarting, as clients see it (connections refused, then accepted)."""

    def pipe(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def serve():
        time.sleep(delay)
        listener.listen()
        listener.settimeout(1.0)
        end = time.monotonic() + 120
        while time.monotonic() < end:
            try:
                client, _ = listener.accept()
            except socket.timeout:
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
