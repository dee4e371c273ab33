"""Concurrent writers and crashes, as real `preflab` processes on the real databases.

Two imports of overlapping files at once, `pairs build` while an import runs, two
builds at once, `kill -9` mid-import, and (Postgres) the server dropping the
importer's connection. Every case ends with no error shown, no duplicate row, and
the counts the same runs give one after another.
"""

import json
import os
import signal
import uuid

import pytest

from .procs import (
    consistent,
    counts,
    finish,
    pairs_consistent,
    rankings_file,
    rows,
    run_here,
    run_ok,
    scalar,
    start,
    wait_for,
    writes_held,
)

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out


@pytest.fixture
def other_url(db_url, tmp_path, request):
    """A second fresh database of the same kind as `db_url`, for the one-after-another runs."""
    if db_url.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'sequential.db'}"
    from sqlalchemy import create_engine, text

    from tests.conftest import POSTGRES_URL, _postgres_schema_url

    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_URL)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = _postgres_schema_url(schema)
    from preflab.db.engine import make_engine, upgrade

    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()

    def drop():
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()

    request.addfinalizer(drop)
    return url


def check_summary(summary: dict) -> None:
    assert summary["read"] == summary["imported"] + summary["duplicates"] + summary["quarantined"] + summary["blank"]


def test_two_imports_of_overlapping_files_at_once(db_url, other_url, tmp_path):
    # Both files open with the same 400 rankings, in a different order within each batch:
    # the two writers insert the same rows at the same moment, in opposite lock orders,
    # which is how unique-key races and deadlocks arise.
    shuffled = [n for start_ in range(0, 400, 200) for n in reversed(range(start_, start_ + 200))]
    a = rankings_file(tmp_path / "a.jsonl", range(800), bad=3)
    b = rankings_file(tmp_path / "b.jsonl", shuffled + list(range(800, 1200)), bad=3)
    batch = ("--batch-lines", "200")
    procs = []
    with writes_held(db_url, procs):
        procs.extend(start(db_url, "import", "rankings", str(path), "--json", *batch) for path in (a, b))
    results = [finish(p) for p in procs]
    for code, _out, err in results:
        assert code == 0 and "Error" not in err and "Traceback" not in err, err
    first, second = (json.loads(out) for _, out, _ in results)
    for summary in (first, second):
        check_summary(summary)
    assert first["imported"] + second["imported"] == 1200  # each ranking imported once, by one of them
    assert first["duplicates"] + second["duplicates"] == 400
    together = consistent(db_url)

    for path in (a, b):
        run_here(other_url, "import", "rankings", str(path), *batch)
    assert together == consistent(other_url)
    assert together["rankings"] == 1200 and together["prompts"] == 1200
    print(f"retried batches: {first['retried']} + {second['retried']}")


def test_pairs_build_while_an_import_runs(db_url, other_url, tmp_path):
    path = rankings_file(tmp_path / "r.jsonl", range(2000))
    importer = start(db_url, "import", "rankings", str(path), "--json", "--batch-lines", "50")
    wait_for(lambda: counts(db_url)["rankings"] >= 50, what="the first batch")
    builds = 0
    while importer.poll() is None:
        summary = run_ok(db_url, "pairs", "build")
        builds += 1
        pairs_consistent(db_url)  # a build sees whole batches, never part of one
        assert summary["pairs"] == scalar(db_url, "SELECT count(*) FROM comparisons")
    code, _, err = finish(importer)
    assert code == 0 and not err.strip(), err
    final = run_ok(db_url, "pairs", "build")

    run_here(other_url, "import", "rankings", str(path))
    alone = run_here(other_url, "pairs", "build")
    assert final["pairs"] == alone["pairs"] == pairs_consistent(db_url)
    assert consistent(db_url) == consistent(other_url)
    print(f"pairs builds during the import: {builds}")


def test_two_pairs_builds_at_once_keep_one_set_of_pairs(db_url, tmp_path):
    run_here(db_url, "import", "rankings", str(rankings_file(tmp_path / "r.jsonl", range(600))))
    for _ in range(2):
        procs = [start(db_url, "pairs", "build", "--json") for _ in range(2)]
        for code, _, err in (finish(p) for p in procs):
            assert code == 0 and not err.strip(), err
        assert pairs_consistent(db_url) == scalar(db_url, "SELECT count(*) FROM comparisons")


def test_kill_9_mid_import_leaves_whole_batches_and_a_rerun_completes(db_url, other_url, tmp_path):
    path = rankings_file(tmp_path / "r.jsonl", range(2000))
    name = f"preflab-test-{uuid.uuid4().hex[:8]}"
    url = f"{db_url}&application_name={name}" if db_url.startswith("postgresql") else db_url
    proc = start(url, "import", "rankings", str(path), "--json", "--batch-lines", "50")
    wait_for(lambda: counts(db_url)["rankings"] >= 150, what="three batches")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    if url != db_url:  # a COMMIT sent just before the kill may still complete: wait for its backend to end
        wait_for(
            lambda: not rows(db_url, f"SELECT pid FROM pg_stat_activity WHERE application_name = '{name}'"),
            what="the killed import's connection to end",
        )
    killed = consistent(db_url)
    assert killed["rankings"] % 50 == 0 and 150 <= killed["rankings"] < 2000  # whole batches only
    assert killed["raw_records"] == killed["rankings"]

    rerun = run_ok(db_url, "import", "rankings", str(path), "--batch-lines", "50")
    assert rerun["duplicates"] == killed["rankings"] and rerun["imported"] == 2000 - killed["rankings"]
    run_here(other_url, "import", "rankings", str(path))
    assert consistent(db_url) == consistent(other_url)
    print(f"killed after {killed['rankings']} of 2000 rankings")


@pytest.mark.postgres
def test_import_survives_the_server_dropping_its_connection(postgres_url, tmp_path):
    name = f"preflab-test-{uuid.uuid4().hex[:8]}"
    url = f"{postgres_url}&application_name={name}"
    path = rankings_file(tmp_path / "r.jsonl", range(1500))
    proc = start(url, "import", "rankings", str(path), "--json", "--batch-lines", "50")
    wait_for(lambda: counts(postgres_url)["rankings"] >= 100, what="two batches")
    dropped = 0
    for _ in range(2):  # drop it twice, a little apart
        dropped += len(
            rows(
                postgres_url,
                f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{name}'",
            )
        )
        wait_for(
            lambda: proc.poll() is not None or counts(postgres_url)["rankings"] >= 500 * (dropped + 1),  # noqa: B023 (called within this iteration)
            what="more batches",
        )
    code, out, err = finish(proc)
    assert code == 0 and not err.strip(), err
    summary = json.loads(out)
    assert summary["imported"] == 1500 and summary["read"] == 1500
    assert dropped >= 1  # a connection dropped mid-transaction is retried, one dropped between is replaced
    assert consistent(postgres_url)["rankings"] == 1500
    print(f"connections dropped: {dropped}, batches retried: {summary['retried']}")
