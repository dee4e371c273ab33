"""A real Label Studio server for the tests, started once per test session.

Label Studio is the PyPI package `label-studio`, installed in its own virtual
environment (its pins clash with ours; `.ci/run` creates it). The server runs on
a free loopback port with a throwaway data directory and an admin token set
through LABEL_STUDIO_USER_TOKEN; the tests drive it with label-studio-sdk 2.x.
A missing install fails the tests (it is not a reason to skip them).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

LS_BIN_ENV = "PREFLAB_LABEL_STUDIO_BIN"
# The server a parallel run's controller started for its workers (`share_with_workers`): its fields, as JSON.
SHARED_ENV = "PREFLAB_TEST_LABEL_STUDIO_SHARED"
DEFAULT_LS_BIN = Path.home() / ".cache" / "ls-venv" / "bin" / "label-studio"  # where `make test` puts it
STARTUP_TIMEOUT = float(os.environ.get("PREFLAB_LABEL_STUDIO_STARTUP_TIMEOUT", "900"))
CHROMIUM = os.environ.get("PREFLAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
# A documentation range (RFC 5737) no test server uses, still banned on the test Label Studio.
BANNED_SUBNET = "192.0.2.0/24"


@dataclass
class LabelStudioServer:
    url: str
    token: str
    admin_email: str
    admin_password: str
    data_dir: Path
    log: Path
    users: dict[str, tuple[int, str]] = field(default_factory=dict)  # email -> (id, password)

    def sdk(self):
        from label_studio_sdk import LabelStudio

        return LabelStudio(base_url=self.url, api_key=self.token)

    def signup(self, email: str, password: str | None = None) -> int:
        """A Label Studio user who can log in (through the signup form, as a person would)."""
        if email in self.users:
            return self.users[email][0]
        password = password or secrets.token_urlsafe(12)
        with httpx.Client(base_url=self.url, timeout=60) as web:
            page = web.get("/user/signup/")
            csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
            answer = web.post(
                "/user/signup/",
                data={"csrfmiddlewaretoken": csrf, "email": email, "password": password, "allow_newsletters": "false"},
                headers={"Referer": f"{self.url}/user/signup/"},
            )
            assert answer.status_code == 302, f"signup of {email} failed: HTTP {answer.status_code}"
        user_id = next(u.id for u in self.sdk().users.list() if u.email == email)
        self.users[email] = (user_id, password)
        return user_id


def label_studio_bin_path() -> Path:
    return Path(os.environ.get(LS_BIN_ENV, DEFAULT_LS_BIN))


def label_studio_bin() -> Path:
    path = label_studio_bin_path()
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"Label Studio is not installed at {path} (set {LS_BIN_ENV}); create it with "
            f"`python3 -m venv ~/.cache/ls-venv && ~/.cache/ls-venv/bin/pip install label-studio` "
            f"(`.ci/run` does this)",
            pytrace=False,
        )
    return path


SERVER_PORTS = range(20000, 32000)  # below Linux's ephemeral range: no outgoing connection takes one


def server_port() -> int:
    """A free loopback port for Label Studio, outside the range the kernel gives outgoing connections.

    Two test runs at once may still pick the same one: Label Studio then moves to the
    next free port itself and says so in its log, which `_wait_ready` follows.
    """
    start = SERVER_PORTS.start + os.getpid() % len(SERVER_PORTS)
    for offset in range(len(SERVER_PORTS)):
        port = SERVER_PORTS.start + (start - SERVER_PORTS.start + offset) % len(SERVER_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port for Label Studio")


def reserved_port() -> socket.socket:
    """A loopback socket bound to a port and not listening: connections to it are refused, and no
    other process can take the port until the socket is closed or starts listening.

    Tests use it for "nothing listens there" and for a server that comes up later, so no
    race with another process decides them.
    """
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


def _tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


@dataclass
class _Started:
    proc: subprocess.Popen
    server: LabelStudioServer


_started: _Started | None = None


def start_server() -> _Started:
    """Launch Label Studio (it migrates a fresh database: minutes on a small machine); do not wait."""
    global _started
    if _started is not None:
        return _started
    binary = label_studio_bin()
    port = server_port()
    data_dir = Path(tempfile.mkdtemp(prefix="preflab-label-studio-"))
    log = data_dir / "server.log"
    token = secrets.token_hex(20)
    admin_email, admin_password = "admin@preflab.test", secrets.token_urlsafe(12)
    env = {
        **os.environ,
        "LABEL_STUDIO_BASE_DATA_DIR": str(data_dir),
        "LABEL_STUDIO_USERNAME": admin_email,
        "LABEL_STUDIO_PASSWORD": admin_password,
        "LABEL_STUDIO_USER_TOKEN": token,
        "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
        # No network here: no version check against PyPI, no analytics, no error reporting.
        "LATEST_VERSION_CHECK": "false",
        "COLLECT_ANALYTICS": "false",
        "SENTRY_DSN": "",
        "FRONTEND_SENTRY_DSN": "",
        # `preflab serve` runs beside it on loopback: lift the SSRF guard's default banned subnets
        # (ML_BLOCK_LOCAL_IP and SSRF_PROTECTION_ENABLED both check them), as the README tells users to.
        # TEST-NET-1 stays banned, so the refusal `ls connect` turns into one line is tested for real.
        "USE_DEFAULT_BANNED_SUBNETS": "false",
        "USER_ADDITIONAL_BANNED_SUBNETS": BANNED_SUBNET,
    }
    for name in ("LABEL_STUDIO_API_KEY", "LABEL_STUDIO_URL", "PREFLAB_DATABASE_URL"):
        env.pop(name, None)
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(binary), "start", "--no-browser", "--internal-host", "127.0.0.1", "--host", url, "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=data_dir,
            preexec_fn=_own_session_dying_with_parent,
        )
    _started = _Started(proc, LabelStudioServer(url, token, admin_email, admin_password, data_dir, log))
    return _started


def stop_server() -> None:
    global _started
    if _started is not None:
        _stop(_started.proc)
        shutil.rmtree(_started.server.data_dir, ignore_errors=True)
        _started = None


def uses_label_studio(items) -> bool:
    return any("ls_server" in getattr(item, "fixturenames", ()) for item in items)


def started_elsewhere() -> bool:
    """Whether this process uses a server it did not start (a parallel run's, or one given by URL)."""
    return bool(os.environ.get(SHARED_ENV) or os.environ.get("PREFLAB_TEST_LABEL_STUDIO_URL"))


def share_with_workers() -> None:
    """In a parallel run's controller: start the one server every worker uses (they inherit its address).

    Started before the workers are, it migrates while they collect and run the tests before the first that
    needs it, as a lone run's does (`pytest_collection_finish`); the run's last act stops it (`stop_server`).
    """
    server = start_server().server
    fields = {k: str(v) for k, v in vars(server).items() if k != "users"}
    os.environ[SHARED_ENV] = json.dumps({**fields, "pid": _started.proc.pid})


@pytest.fixture(scope="session")
def ls_server():
    """Label Studio for the whole test run: started when the tests were collected, stopped at the end.

    In a parallel run (pytest-xdist) the controller starts it and every worker uses that one (`SHARED_ENV`).
    PREFLAB_TEST_LABEL_STUDIO_URL and PREFLAB_TEST_LABEL_STUDIO_TOKEN point the
    tests at a server already running instead (quicker while developing).
    """
    shared = os.environ.get(SHARED_ENV)
    if shared:
        fields = json.loads(shared)
        server = LabelStudioServer(
            fields["url"],
            fields["token"],
            fields["admin_email"],
            fields["admin_password"],
            Path(fields["data_dir"]),
            Path(fields["log"]),
        )
        _wait_answering(server, int(fields["pid"]))
        yield server
        return
    reuse = os.environ.get("PREFLAB_TEST_LABEL_STUDIO_URL")
    if reuse:
        token = os.environ.get("PREFLAB_TEST_LABEL_STUDIO_TOKEN", "")
        yield LabelStudioServer(reuse.rstrip("/"), token, "", "", Path(tempfile.gettempdir()), Path("/dev/null"))
        return
    started = start_server()
    try:
        _wait_ready(started.proc, started.server.url, started.server.token, started.server.log)
        yield started.server
    finally:
        stop_server()


def _own_session_dying_with_parent() -> None:
    """In the child: a session of its own (stopped as a group), and SIGTERM if pytest dies first."""
    os.setsid()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:  # not Linux: the fixture's own teardown still stops it
        pass


def _moved(url: str, log: Path) -> str:
    """The URL Label Studio listens on: it takes the next port by itself when its own is busy."""
    try:
        found = re.findall(r"Trying to start at (\d+)", log.read_text(errors="replace"))
    except OSError:
        return url
    if not found:
        return url
    moved = f"{url.rsplit(':', 1)[0]}:{found[-1]}"
    if _started is not None:  # this process started it (a worker of a parallel run did not)
        _started.server.url = moved
    return moved


def _wait_ready(proc: subprocess.Popen, url: str, token: str, log: Path) -> None:
    """Wait for the server this process started to answer; stopped, and the test failed, if it does not."""
    if _answers(url, token, log, lambda: None if proc.poll() is None else f" with status {proc.returncode}") is None:
        _stop(proc)
        pytest.fail(f"Label Studio did not answer within {STARTUP_TIMEOUT:.0f}s:\n{_tail(log)}", pytrace=False)


def _wait_answering(server: LabelStudioServer, pid: int) -> None:
    """Wait for a server another process started (a parallel run's controller) to answer, as `_wait_ready` does."""
    gone = Path(f"/proc/{pid}")
    answered = _answers(server.url, server.token, server.log, lambda: None if gone.exists() else "")
    if answered is None:
        pytest.fail(f"Label Studio did not answer within {STARTUP_TIMEOUT:.0f}s:\n{_tail(server.log)}", pytrace=False)
    server.url = answered  # where it listens, should it have moved to the next port


def _answers(url: str, token: str, log: Path, exit_status) -> str | None:
    """The URL at which Label Studio answers its whoami within STARTUP_TIMEOUT (it may move to the next port), or
    None. The test fails at once when the process has gone: `exit_status()` then says what follows "exited" (None
    while it runs)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        url = _moved(url, log)
        status = exit_status()
        if status is not None:
            pytest.fail(f"Label Studio exited{status} while starting:\n{_tail(log)}", pytrace=False)
        try:
            headers = {"Authorization": f"Token {token}"}
            answer = httpx.get(f"{url}/api/current-user/whoami", headers=headers, timeout=10)
            if answer.status_code == 200:
                return url
        except httpx.HTTPError:
            pass
        time.sleep(2)
    return None


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)  # its own session: the server and its workers, nothing else
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.fixture
def ls_env(ls_server, monkeypatch):
    """LABEL_STUDIO_URL and LABEL_STUDIO_API_KEY pointing at the test server (after isolated_env cleared them)."""
    monkeypatch.setenv("LABEL_STUDIO_URL", ls_server.url)
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", ls_server.token)
    return ls_server


def make_cli(database_url: str):
    """Run `preflab --database-url URL ARGS…` in-process; returns the click Result."""
    from preflab.cli import cli as root

    runner = CliRunner()

    def run(*args, expect_ok=True):
        result = runner.invoke(root, ["--database-url", database_url, *map(str, args)], catch_exceptions=False)
        if expect_ok:
            assert result.exit_code == 0, result.output
        return result

    return run


@pytest.fixture
def lcli(sqlite_url):
    """The CLI on a fresh SQLite file (the Label Studio tests that need not run twice)."""
    return make_cli(sqlite_url)
