"""Running preflab as real processes, and reading what they left in the database."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError

from preflab.db.engine import make_engine
from preflab.db.models import (
    Annotator,
    Candidate,
    Comparison,
    PairBuild,
    Prompt,
    Ranking,
    RankingItem,
    RawRecord,
)

from .helpers import ranking_line, write_lines

TABLES = (Prompt, Candidate, Annotator, Ranking, RankingItem, RawRecord)


def start(url: str, *args: str) -> subprocess.Popen:
    """Start `python -m preflab --database-url URL ARGS…` with its output captured."""
    return subprocess.Popen(
        [sys.executable, "-m", "preflab", "--database-url", url, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# A job's progress in a log (`preflab.console`): "importing r.jsonl: 150/1,500 (10%), 12s elapsed, about 1m 48s left".
PROGRESS = re.compile(r"[^:\n]+: [\d,]+(/[\d,]+ \(\d+%\)| done), \S+( \S+)? elapsed(, about \S+( \S+)? left)?")


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of a finished process; stderr without the progress lines a job says every
    10 s where stderr is no terminal (a slow machine makes some), so what is left is what went wrong."""
    out, err = proc.communicate(timeout=timeout)
    return (
        proc.returncode,
        out,
        "".join(line for line in err.splitlines(keepends=True) if not PROGRESS.fullmatch(line.rstrip("\n"))),
    )


def run_ok(url: str, *args: str) -> dict:
    """Run preflab to the end; it must succeed, print no error, and its --json output is returned."""
    code, out, err = finish(start(url, *args, "--json"))
    assert code == 0 and "Error" not in err and "Traceback" not in err, err
    return json.loads(out)


def run_here(url: str, *args: str) -> dict:
    """Run preflab in this process (no interpreter start-up): for the one-after-another runs."""
    from click.testing import CliRunner

    from preflab.cli import cli

    result = CliRunner().invoke(cli, ["--database-url", url, *args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def counts(url: str, tables=TABLES) -> dict[str, int]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return {t.__tablename__: conn.scalar(select(func.count()).select_from(t)) for t in tables}
    finally:
        engine.dispose()


def rows(url: str, sql: str) -> list[tuple]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql))]
    finally:
        engine.dispose()


def scalar(url: str, sql: str):
    return rows(url, sql)[0][0]


@contextmanager
def writes_held(url: str, procs_: list[subprocess.Popen]) -> Iterator[None]:
    """Hold every write to the database until `procs_` are all waiting to write, then let them go at once.

    This makes a race certain rather than lucky: the processes start writing in the
    same instant, whatever their start-up times.
    """
    engine = make_engine(url)
    conn = engine.connect()
    if engine.dialect.name == "postgresql":
        conn.execute(text("LOCK TABLE raw_records IN EXCLUSIVE MODE"))  # reads go on, writes wait
        waiting = "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'raw_records'::regclass"
        yield
        wait_for(lambda: scalar(url, waiting) >= len(procs_), what="the writers to wait")
    else:
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # SQLite's write lock; the writers wait in their busy handler
        yield
        database = str(Path(engine.url.database).resolve())
        wait_for(
            lambda: all(database in _open_files(p.pid) for p in procs_),
            what="the writers to open the database",
        )
        # A writer refused SQLite's lock waits in the kernel: asleep in its busy handler between tries, or blocked on
        # the file lock itself. Seen there, not guessed by a sleep.
        wait_for(lambda: all(_waiting(p.pid) for p in procs_), what="the writers to wait for the write lock")
    conn.commit()
    conn.close()
    engine.dispose()


# What Linux's /proc/PID/task/*/wchan names for a thread waiting for SQLite's lock: the busy handler's sleep between
# tries, or a file lock taken with a wait (builds with SQLITE_ENABLE_SETLK_TIMEOUT).
LOCK_WAITS = ("nanosleep", "locks_lock_inode_wait")


def _waiting(pid: int) -> bool:
    """Whether a thread of process `pid` waits for a lock now, by the kernel function it waits in."""
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            if any(wait in (task / "wchan").read_text() for wait in LOCK_WAITS):
                return True
        except OSError:  # the thread ended meanwhile
            continue
    return False


def _open_files(pid: int) -> list[str]:
    """The paths of the files a process holds open; one it closes (or an exit) while they are read is left out."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return []
    paths = []
    for fd in fds:
        try:
            paths.append(os.path.realpath(f"/proc/{pid}/fd/{fd}", strict=True))
        except OSError:
            continue
    return paths


def wait_for(condition, timeout: float = 120, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout

    def met() -> bool:
        try:
            return condition()
        except DBAPIError:  # the process has not made the tables yet
            return False

    while not met():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def rankings_file(path: Path, numbers, bad: int = 0) -> Path:
    """Rankings of 3 responses numbered as given (each a distinct prompt), with `bad` unusable lines."""
    lines = [
        ranking_line(
            f"prompt {i}",
            [f"a{i}", f"b{i}", f"c{i}"],
            [[0], [1, 2]] if i % 3 else [[2], [0], [1]],
            f"annotator {i % 5}",
            id=f"r{i}",
        )
        for i in numbers
    ]
    for k in range(bad):
        lines.insert(len(lines) * (k + 1) // (bad + 1), f'{{"not": "a ranking {k}"}}')
    return write_lines(path, lines)


# The references the schema holds without foreign-key constraints (migrations 0005 and 0007):
# each query counts the rows whose reference leads nowhere.
DANGLING = {
    "rankings.prompt_id": "SELECT count(*) FROM rankings WHERE prompt_id NOT IN (SELECT id FROM prompts)",
    "rankings.annotator_id": "SELECT count(*) FROM rankings WHERE annotator_id NOT IN (SELECT id FROM annotators)",
    "rankings.raw_record_id": "SELECT count(*) FROM rankings WHERE raw_record_id IS NOT NULL "
    "AND raw_record_id NOT IN (SELECT id FROM raw_records)",
    "candidates.prompt_id": "SELECT count(*) FROM candidates WHERE prompt_id NOT IN (SELECT id FROM prompts)",
    "ranking_items.ranking_id": "SELECT count(*) FROM ranking_items WHERE ranking_id NOT IN (SELECT id FROM rankings)",
    "ranking_items.candidate_id": "SELECT count(*) FROM ranking_items "
    "WHERE candidate_id NOT IN (SELECT id FROM candidates)",
}


def dangling(url: str) -> dict[str, int]:
    """References without a constraint that lead nowhere, by column; {} when every one holds."""
    found = {column: scalar(url, query) for column, query in DANGLING.items()}
    return {column: n for column, n in found.items() if n}


def consistent(url: str) -> dict[str, int]:
    """Check what no crash or race may leave behind; returns the table counts."""
    n = counts(url)
    assert dangling(url) == {}
    # every ranking is whole: one item per response, nothing half-written
    assert (
        scalar(
            url,
            "SELECT count(*) FROM (SELECT ranking_id FROM ranking_items GROUP BY ranking_id HAVING count(*) <> 3) AS t",
        )
        == 0
    )
    assert n["ranking_items"] == 3 * n["rankings"]
    # no ranking twice, and every stored line that parsed has its ranking
    assert (
        scalar(
            url,
            "SELECT count(*) FROM (SELECT annotator_id, external_id FROM rankings "
            "GROUP BY annotator_id, external_id HAVING count(*) > 1) AS t",
        )
        == 0
    )
    assert (
        scalar(
            url,
            "SELECT count(*) FROM raw_records WHERE status = 'ok' AND id NOT IN (SELECT raw_record_id FROM rankings)",
        )
        == 0
    )
    assert scalar(url, "SELECT count(*) FROM prompts WHERE id NOT IN (SELECT prompt_id FROM rankings)") == 0
    return n


def pairs_consistent(url: str) -> int:
    """The comparisons are exactly those the newest build leaves, and that build's counts describe them."""
    builds = counts(url, (PairBuild, Comparison))
    assert builds["pair_builds"] >= 1
    [(latest, n_rankings, n_pairs)] = rows(
        url, "SELECT id, n_rankings, n_pairs FROM pair_builds ORDER BY id DESC LIMIT 1"
    )
    assert builds["comparisons"] == n_pairs
    # Incremental builds keep unchanged rankings' pairs: every pair is of a ranking the
    # comparisons hold (rankings.in_pairs), written by the newest build or an earlier one.
    assert scalar(url, f"SELECT count(*) FROM comparisons WHERE build_id > {int(latest)}") == 0
    assert (
        scalar(url, "SELECT count(*) FROM comparisons WHERE ranking_id NOT IN (SELECT id FROM rankings WHERE in_pairs)")
        == 0
    )
    assert scalar(url, "SELECT count(*) FROM rankings WHERE in_pairs") == n_rankings
    assert scalar(url, "SELECT count(DISTINCT ranking_id) FROM comparisons") == n_rankings
    # each ranking of the files above yields 2 pairs ([[0], [1, 2]]) or 3 ([[2], [0], [1]])
    assert (
        scalar(
            url,
            "SELECT count(*) FROM (SELECT ranking_id FROM comparisons GROUP BY ranking_id "
            "HAVING count(*) NOT IN (2, 3)) AS t",
        )
        == 0
    )
    return n_pairs
