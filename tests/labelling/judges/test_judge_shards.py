"""A judge shard says what it did itself: its measures count its own rankings, and after `kill -9` its re-run
reads its own stored answers back and says how many (issue 46, 1i).

The judge asks the fault app (tests/fault_app.py), which answers every verdict the same way each time it is
asked; the killed shard is a real process, killed with SIGKILL while its answers are being stored.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from preflab.db.requests import EngineRequest
from preflab.db.store import content_hash
from preflab.labelling.selection import shard_of

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

ROOT = Path(__file__).resolve().parents[3]
PROMPTS = [f"Question {k}: which answer is best?" for k in range(24)]
ASKS_PER_PROMPT = 6  # three replies: three pairs, each asked in both orders


def import_prompts(cli, tmp_path) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text(
        "".join(json.dumps({"prompt": p, "responses": [f"{p} Answer {r}." for r in range(3)]}) + "\n" for p in PROMPTS),
        encoding="utf-8",
    )
    cli("import", "prompts", path)


def in_shard(k: int) -> list[str]:
    return [p for p in PROMPTS if shard_of(content_hash(p), 2) == k]


def judge(url: str, *more: str) -> list[str]:
    return ["judge", "pairwise", "--engine", "openai", "--api-base", url, "--model", "fault-model", *more]


def stored(sessions) -> int:
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(EngineRequest))


def test_a_shard_measures_its_own_rankings_not_the_judges_history(cli, fault_server, tmp_path):
    import_prompts(cli, tmp_path)
    url, _ = fault_server()
    first = json.loads(cli(*judge(url, "--shard", "0/2", "--json")).stdout)
    second = json.loads(cli(*judge(url, "--shard", "1/2", "--json")).stdout)
    for k, out in enumerate((first, second)):
        assert out["ranked"] == len(in_shard(k)) and out["report"]["scope"] == "this run"
        assert out["report"]["rankings"] == len(in_shard(k)) and out["report"]["pairs_judged"] == 3 * len(in_shard(k))
    # The judge's whole history is `judge report`'s: both shards.
    (whole,) = json.loads(cli("judge", "report", "--json").stdout)
    assert whole["pairs_judged"] == 3 * len(PROMPTS) and whole["scope"] == "all runs"
    cli("import", "prompts", write_more(tmp_path))  # one more prompt in each shard's future
    text = cli(*judge(url, "--shard", "1/2")).stdout
    line = next(line for line in text.splitlines() if "swap consistency" in line)
    assert line.startswith("this run: swap consistency") and line.split(" on ")[1].startswith("3 pairs")
    again = cli(*judge(url, "--shard", "1/2")).stdout  # nothing new: the judge's measures, said to be all runs'
    assert next(line for line in again.splitlines() if "swap consistency" in line).startswith("all runs: ")


def write_more(tmp_path) -> Path:
    k = next(n for n in range(100, 1000) if shard_of(content_hash(f"Question {n}: which answer is best?"), 2) == 1)
    path = tmp_path / "more.jsonl"
    prompt = f"Question {k}: which answer is best?"
    path.write_text(json.dumps({"prompt": prompt, "responses": ["A.", "B.", "C."]}) + "\n", encoding="utf-8")
    return path


def test_a_killed_judge_shard_reads_its_own_stored_answers_back(cli, sessions, db_url, fault_server, tmp_path):
    import_prompts(cli, tmp_path)
    url, faults = fault_server(delay=0.05)
    other = json.loads(cli(*judge(url, "--shard", "1/2", "--json")).stdout)  # another shard's answers, stored first
    theirs = stored(sessions)
    assert other["ranked"] == len(in_shard(1)) and theirs == ASKS_PER_PROMPT * len(in_shard(1))

    mine = ASKS_PER_PROMPT * len(in_shard(0))
    command = [
        sys.executable,
        "-m",
        "preflab",
        "--database-url",
        db_url,
        *judge(url, "--shard", "0/2", "--concurrency", "4"),
    ]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while stored(sessions) < theirs + 20:
        assert proc.poll() is None and time.monotonic() < deadline, "the shard ended before it could be killed"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    kept = stored(sessions) - theirs
    assert 20 <= kept < mine  # killed within its first batch: answers stored, no ranking written yet

    text = cli(*judge(url, "--shard", "0/2")).stdout
    # Its own answers are read back (not the other shard's), and the summary says how many.
    assert f"{mine - kept:,} requests ({kept:,} answered from the store)" in text, text
    assert re.search(rf"ranked {len(in_shard(0))} prompts", text)
    assert stored(sessions) == theirs + mine
    assert sum(faults.served.values()) <= theirs + mine + 4  # at most the asks in flight were answered twice
