"""Many workers, one store: `--shard K/N` workers as parallel processes on Postgres.

Three shards of `generate` (and of `judge likelihood`) run at once, as a Slurm array
or a Kubernetes indexed Job would run them, and must store exactly what one run
stores (compared with one run on a fresh SQLite file: the ids match, as both stores
import the same file, but only the content is compared). One of the three is killed
with `kill -9` in the middle of its run: it is made to wait at a known prompt by a
row of the same key that the test holds uncommitted, so the kill lands mid-run on
every machine. Run again, it asks only for what is missing, and the store ends exact.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import insert, select, text

from preflab.db.engine import make_engine
from preflab.db.models import Annotator, Candidate, ModelVersion, Prompt, Ranking, RankingItem
from preflab.db.store import content_hash
from preflab.labelling.selection import shard_of
from tests.db.procs import finish, run_here, start, wait_for
from tests.tiny_models import tiny_causal_lm
from tests.toy_data import one_thread  # noqa: F401 (fixture)

pytestmark = [pytest.mark.slow, pytest.mark.postgres]  # measured at a second or more a test: `make check` leaves it out


def longer_and_longer(sizes: list[int]) -> list[str]:
    """Prompts, each longer than the one before, with sizes[k] of them in slice k of len(sizes).

    Generation batches prompts by length, so each slice is worked in id order.
    """
    out, have = [], [0] * len(sizes)
    for i in range(1000):
        prompt = f"Question {i}: why" + " and why" * i + "?"
        k = shard_of(content_hash(prompt), len(sizes))
        if have[k] < sizes[k]:
            out.append(prompt)
            have[k] += 1
        if have == sizes:
            return out
    raise AssertionError("not enough prompts")


VICTIM = 2  # the slice killed mid-run: 10 prompts, more than the judge's batch of 8
STOP_AT = 9  # ... at its 10th prompt, in the judge's second batch
PROMPTS = longer_and_longer([3, 3, 10])
SLICES = [shard_of(content_hash(p), 3) for p in PROMPTS]
GENERATE = ["generate", "-n", "2", "--batch-size", "2", "--max-new-tokens", "4"]  # a batch: one prompt's two
JUDGE = ["judge", "likelihood", "--batch-size", "1"]  # one response per forward pass: no padding in the scores


@pytest.fixture(autouse=True)
def workers_on_one_thread(one_thread, monkeypatch):
    """One intra-op thread in the workers too, as a job array gives each its cores: every process computes alike."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    return tiny_causal_lm(tmp_path_factory.mktemp("models") / "tiny-lm")


@pytest.fixture
def stores(postgres_url, sqlite_url, tmp_path) -> tuple[str, str]:
    """(one run's SQLite, the workers' Postgres), each with PROMPTS imported; the judge's with two responses each."""
    path = tmp_path / "prompts.jsonl"
    path.write_text(
        "".join(
            json.dumps({"prompt": p, "responses": [f"Because {i}.", f"No idea about {i}."]}) + "\n"
            for i, p in enumerate(PROMPTS)
        ),
        encoding="utf-8",
    )
    for url in (sqlite_url, postgres_url):
        run_here(url, "import", "prompts", str(path))
    return sqlite_url, postgres_url


def candidates(url: str) -> list[tuple]:
    """Every generated candidate by content: prompt, text, model, its model version, sampling (seed included)."""
    query = (
        select(
            Prompt.text, Candidate.text, Candidate.content_hash, Candidate.model, ModelVersion.name, Candidate.sampling
        )
        .join(Prompt, Prompt.id == Candidate.prompt_id)
        .join(ModelVersion, ModelVersion.id == Candidate.model_version_id)
    )
    with _connect(url) as conn:
        return sorted((*row[:-1], json.dumps(row[-1], sort_keys=True)) for row in conn.execute(query))


def rankings(url: str) -> list[tuple]:
    """Every judge ranking by content: prompt, judge, status, tiers, and each item's tier, score and details."""
    query = (
        select(
            Ranking.id,
            Prompt.text,
            Annotator.name,
            Annotator.judge_kind,
            Annotator.config,
            Ranking.status,
            Ranking.n_tiers,
            Ranking.judge_run,
            Ranking.version,
        )
        .join(Prompt, Prompt.id == Ranking.prompt_id)
        .join(Annotator, Annotator.id == Ranking.annotator_id)
        .where(Ranking.source == "judge")
    )
    items = (
        select(
            RankingItem.ranking_id,
            Candidate.text,
            RankingItem.tier,
            RankingItem.shown_position,
            RankingItem.score,
            RankingItem.details,
        )
        .join(Candidate, Candidate.id == RankingItem.candidate_id)
        .order_by(RankingItem.shown_position)
    )
    with _connect(url) as conn:
        by_ranking: dict[int, list] = {}
        for ranking_id, *item, details in conn.execute(items):
            # A candidate's share of its batch's judging time is a measurement, not a judgement.
            kept = {k: v for k, v in (details or {}).items() if k != "seconds"}
            by_ranking.setdefault(ranking_id, []).append((*item, json.dumps(kept, sort_keys=True)))
        return sorted(
            (*row[1:4], json.dumps(row[4], sort_keys=True), *row[5:], tuple(by_ranking[row[0]]))
            for row in conn.execute(query)
        )


def judged(url: str) -> list[tuple]:
    """Every judge ranking by content (`rankings`), less what the judge's runs cost (its configuration's "engine"
    adds up each run's requests and seconds: N shards are N runs of one judge, a measurement, not a judgement), and
    each pair's other candidate by its text (two stores number generated candidates in the order they stored them)."""
    with _connect(url) as conn:
        text = dict(conn.execute(select(Candidate.id, Candidate.text)).all())
    out = []
    for prompt, name, kind, config, *rest, items in rankings(url):
        judge = {k: v for k, v in json.loads(config).items() if k != "engine"}
        read = []
        for *item, details in items:
            details = json.loads(details)
            details["pairs"] = [{**pair, "vs": text[pair["vs"]]} for pair in details.get("pairs", [])]
            read.append((*item, details))
        out.append((prompt, name, kind, judge, *rest, read))
    return out


def counted(url: str, what) -> dict[str, int]:
    """Prompt text -> rows of `what` (Candidate, or Ranking) stored for it."""
    with _connect(url) as conn:
        found = {}
        for (prompt,) in conn.execute(select(Prompt.text).join(what, what.prompt_id == Prompt.id)):
            found[prompt] = found.get(prompt, 0) + 1
        return found


@contextmanager
def _connect(url: str):
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


@contextmanager
def held(url: str, table, row: dict) -> Iterator[int]:
    """Insert `row` and keep it uncommitted: a writer of the same key waits for this transaction. Yields its pid."""
    engine = make_engine(url)
    conn = engine.connect()
    try:
        conn.execute(insert(table).values(**row))
        yield conn.scalar(text("SELECT pg_backend_pid()"))
    finally:
        conn.rollback()
        conn.close()
        engine.dispose()


def waiting_on(url: str, holder: int) -> int:
    """How many sessions wait for the transaction of backend `holder`."""
    with _connect(url) as conn:
        return conn.scalar(
            text("SELECT count(*) FROM pg_stat_activity WHERE :holder = ANY(pg_blocking_pids(pid))"), {"holder": holder}
        )


def shards_with_one_killed(url: str, command: list[str], table, row: dict) -> None:
    """Run shards 0, 1, 2 at once; the victim waits on `row` at its STOP_AT-th prompt and is killed there."""
    with held(url, table, row) as holder:
        procs = [start(url, *command, "--shard", f"{k}/3", "--json") for k in range(3)]
        wait_for(lambda: waiting_on(url, holder) == 1, timeout=300, what="the victim shard to reach its prompt")
        for k, proc in enumerate(procs):
            if k != VICTIM:
                code, out, err = finish(proc)
                assert code == 0 and "Traceback" not in err, err
                assert json.loads(out)["prompts"] == SLICES.count(k)
        os.kill(procs[VICTIM].pid, signal.SIGKILL)
        assert procs[VICTIM].wait(timeout=60) == -signal.SIGKILL


def victim_prompts() -> list[str]:
    return [p for p, k in zip(PROMPTS, SLICES) if k == VICTIM]


def test_three_generate_shards_one_killed_store_what_one_run_stores(stores, tiny_lm):
    one_run, workers = stores
    model = ["--model", str(tiny_lm)]
    whole = run_here(one_run, *model, *GENERATE)
    assert whole["prompts"] == len(PROMPTS) and whole["stored"] == 2 * len(PROMPTS)
    reference = candidates(one_run)
    mine = victim_prompts()
    stop = next(r for r in reference if r[0] == mine[STOP_AT])  # the candidate the victim makes there
    with _connect(workers) as conn:
        stop_id = conn.scalar(select(Prompt.id).where(Prompt.text == stop[0]))
    shards_with_one_killed(
        workers,
        [*model, *GENERATE],
        Candidate,
        {"prompt_id": stop_id, "text": stop[1], "content_hash": stop[2], "model": stop[3]},
    )

    stored = counted(workers, Candidate)
    # two imported responses each, and two generated ones up to where the victim was killed
    assert {p: n for p, n in stored.items() if p in mine} == {p: 4 if i < STOP_AT else 2 for i, p in enumerate(mine)}
    assert sum(stored.values()) == 4 * len(PROMPTS) - 2 * (len(mine) - STOP_AT)
    rerun = run_here(workers, *model, *GENERATE, "--shard", f"{VICTIM}/3")
    assert rerun["prompts"] == len(mine) - STOP_AT and rerun["stored"] == 2 * (len(mine) - STOP_AT)
    assert candidates(workers) == reference
    again = run_here(workers, *model, *GENERATE, "--shard", f"{VICTIM}/3")
    assert again["prompts"] == again["stored"] == 0


def test_three_judge_shards_one_killed_store_what_one_run_stores(stores, tiny_lm):
    one_run, workers = stores
    model = ["--model", str(tiny_lm)]
    whole = run_here(one_run, *model, *JUDGE)
    assert whole["ranked"] == len(PROMPTS)
    reference = rankings(one_run)
    mine = victim_prompts()
    with _connect(one_run) as conn:
        judge = conn.execute(
            select(Annotator.kind, Annotator.name, Annotator.judge_kind, Annotator.model, Annotator.config).where(
                Annotator.kind == "ai"
            )
        ).one()
        stop = conn.execute(
            select(Ranking.external_id, Ranking.prompt_id)
            .join(Prompt, Prompt.id == Ranking.prompt_id)
            .where(Prompt.text == mine[STOP_AT])
        ).one()
    # The judge's annotator is made first here, so the ranking held below can name it; the workers find it.
    with _connect(workers) as conn:
        judge_id = conn.execute(
            insert(Annotator).values(**judge._mapping, pseudonym="ai-held").returning(Annotator.id)
        ).scalar_one()
        conn.commit()
    shards_with_one_killed(
        workers,
        [*model, *JUDGE],
        Ranking,
        {
            "prompt_id": stop.prompt_id,
            "annotator_id": judge_id,
            "source": "judge",
            "external_id": stop.external_id,
            "version": 1,
            "status": "valid",
            "n_tiers": 1,
            "same_as_shown": False,
        },
    )

    ranked = counted(workers, Ranking)
    assert {p for p in ranked if p in mine} == set(mine[:8])  # the first batch of 8 committed, the second lost
    assert set(ranked) == {p for p, k in zip(PROMPTS, SLICES) if k != VICTIM} | set(mine[:8])
    rerun = run_here(workers, *model, *JUDGE, "--shard", f"{VICTIM}/3")
    assert rerun["kept"] == 8 and rerun["ranked"] == len(mine) - 8
    assert rankings(workers) == reference
