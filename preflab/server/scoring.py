"""/predict inside Label Studio's patience: the served judge's model loaded ahead of time, and what cannot be
ranked in time ranked in the background.

Label Studio 1.23 waits `ML_TIMEOUT_PREDICT` for /predict (100 s unless its own environment says otherwise,
`ml/api_connector.py`); past it, it says "Retrieved N predictions" all the same and stores none. Loading the
embedded SmolLM2 and ranking 3,000-word replies took 143 s for 4 tasks and 420 s for 70. So:

- the `scoring` worker loads the served judge's model when the server starts, and again when the version
  served changes (`retraining.ModelWorker` wakes it), never inside a request;
- /predict (`answer_predict`) queues the prompts its tasks need ranked and waits for them until
  `--predict-budget`; it answers with the rankings stored by then, and every other task gets `[]`, for
  which Label Studio stores nothing and which it asks for again at the next retrieve;
- the worker ranks what is queued, the newest request's prompts first, `SCORE_CHUNK` prompts a round: read,
  rank with no transaction open, write. A waiting request gets each round as soon as it is committed, and the
  next retrieve (or the one Label Studio makes when an annotator opens a task with no prediction, in a project
  that shows predictions) finds the rest stored and answers at once.

One thread runs the model, so two retrieves never compete for it; requests only wait.

A judge that reads a causal LM ranks through its engine (`preflab.lm.engines`), which the worker opens once per
judge served and makes ready ahead of time: in process its model is loaded; on a server (`--engine openai`)
nothing is loaded, the server is looked at (it has the model, and prompt log-probabilities for the likelihood
judge) and its answers are stored as they arrive, so nothing is paid for twice. A reward model (or pair ranker)
is loaded into the worker's cache.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from preflab.db.transactions import in_transaction
from preflab.server.workers import Activity, Loop

log = logging.getLogger("preflab.server")
SCORE_CHUNK = 4  # prompts a round: what a waiting /predict gets each time a round commits


def record_spent(session: Session, served, stats: dict[str, Any], recorded: dict[str, Any]) -> None:
    """Add what an engine asked and cost since `recorded` (its stats when last added) to the served judge's
    annotator, where `judge` runs add theirs: `stats --judges` and the report count serve's spend too.
    Each round that asked anything counts as a run."""
    from preflab.db.requests import ENGINE_SUMS
    from preflab.labelling.judges.base import ensure_judge, record_stats

    spent = {name: round((stats.get(name) or 0) - (recorded.get(name) or 0), 6) for name in ENGINE_SUMS}
    if not any(spent.values()):
        return
    currency = {"currency": served.engine.currency}
    record_stats(session, ensure_judge(session, served.run), {**stats, **spent, **currency})


class Scorer:
    """The served judge's model, and the prompts it has to rank: prompt id -> the candidates tasks show."""

    def __init__(self, sessions: sessionmaker[Session], judge: str | None, judge_options: dict, eager: bool = True):
        from preflab.lm.names import ModelCache

        self.sessions, self.judge, self.judge_options = sessions, judge, judge_options
        self.eager = eager  # load the model at start and at each new version; else only once something is queued
        self.cache, self.loaded, self.loading = ModelCache(), None, False
        self.served = None  # the judge of the last round (`served.ServedJudge`)
        self.engine = None  # the open engine of a judge that reads a causal LM (opened by the worker, used by it only)
        self.engine_key, self.ready = None, False  # what it was opened for; whether it is loaded or looked at
        self.recorded: dict[str, Any] = {}  # its stats as last added to the judge's annotator
        self.pending: dict[int, frozenset[int]] = {}
        self.busy: set[int] = set()
        self.later: set[int] = set()  # prompts a /predict answered `[]` for, not ranked yet
        self.later_since, self.later_count = 0.0, 0  # since when, and how many, to say when they are all ranked
        self.changed = threading.Condition()
        self.loop = Loop("scoring", self.step, None, Activity(detail={"ranked": 0}))

    def resolve(self, session: Session):
        """The judge served now (`served.ServedJudge`, or None: nothing to serve); cheap, loads nothing."""
        from preflab.labelling.studio.served import served_judge

        return served_judge(session, self.judge, **self.judge_options)

    # The request's side.

    def want(self, needs: dict[int, frozenset[int]]) -> None:
        """Queue prompts to rank, ahead of those queued before: the newest request is the one still waiting (an
        annotator opening a task, say), where older ones were answered without what is left."""
        with self.changed:
            ahead = {pid: shown | self.pending.get(pid, frozenset()) for pid, shown in needs.items()}
            self.pending = ahead | {pid: shown for pid, shown in self.pending.items() if pid not in ahead}
        self.loop.wake()

    def wait(self, prompt_ids: set[int], deadline: float | None) -> set[int]:
        """Wait until none of `prompt_ids` is queued or being ranked, or `deadline` (`time.monotonic`) passes;
        returns those still waiting."""
        with self.changed:
            while True:
                waiting = {pid for pid in prompt_ids if pid in self.pending or pid in self.busy}
                left = None if deadline is None else deadline - time.monotonic()
                if not waiting or (left is not None and left <= 0) or not self.loop.is_alive():
                    return waiting
                self.changed.wait(1.0 if left is None else min(left, 1.0))  # and look at the thread again

    def leave(self, prompt_ids: set[int]) -> None:
        """Remember prompts a /predict answered without, to say when they are ranked."""
        with self.changed:
            if not self.later:
                self.later_since, self.later_count = time.monotonic(), 0
            new = {pid for pid in prompt_ids if pid in self.pending or pid in self.busy} - self.later
            self.later |= new
            self.later_count += len(new)

    # The worker's side.

    def step(self) -> None:
        try:
            while not self.loop.stopping.is_set():
                served = self.prepare()
                if served is None:  # nothing ranks (what was queued is dropped): a new request wakes this again
                    break
                with self.changed:
                    round_ = dict(itertools.islice(self.pending.items(), SCORE_CHUNK))
                    for pid in round_:
                        del self.pending[pid]
                    self.busy = set(round_)
                if not round_:
                    break
                ranked = self.rank(served, round_)
                with self.changed:
                    self.busy = set()
                    done_later = bool(self.later) and not self.later - round_.keys()
                    self.later -= round_.keys()
                    self.changed.notify_all()
                self.loop.activity.detail["ranked"] += ranked
                if done_later:
                    log.info(
                        "the %d prompts left for later are ranked (in %.1f s): Retrieve predictions again to "
                        "store their predictions",
                        self.later_count,
                        time.monotonic() - self.later_since,
                    )
        except BaseException:
            self.drop("the judge failed")  # requests answer with what is stored; the next retrieve queues them again
            raise
        self.loop.activity.ok()

    def prepare(self):
        """The judge served now, its model ready when it ranks (an older version's model let go first)."""
        from preflab.labelling.judges.table import JUDGES

        served = in_transaction(self.sessions, self.resolve)
        self.served = served
        if served is None or served.kind is None:  # nothing to rank with: stored rankings only
            self.unload()
            self.close()
            self.drop("nothing ranks for /predict")
            return None
        if not JUDGES[served.kind].scorer:
            self.open_engine(served)
            return served
        self.close()  # a judge that reads a causal LM no longer serves
        key = (served.location, True)
        if key != self.loaded and (self.eager or self.pending):
            self.unload()
            self.ready_up(served, lambda: self.cache.get(*key))
            self.loaded = key
        return served

    def ready_up(self, served, ready) -> None:
        """Run `ready` (a load, or a first look at a server), saying so in the log and in /health while it runs."""
        log.info("getting %s ready for /predict: %s", served.model, served.describe())
        began, self.loading = time.monotonic(), True
        try:
            ready()
        finally:
            self.loading = False
        log.info("%s ready in %.1f s", served.model, time.monotonic() - began)

    def unload(self) -> None:
        if self.loaded is not None:
            self.cache.clear()
            self.loaded = None

    def open_engine(self, served) -> None:
        """The served judge's engine, opened once and made ready before anything is asked (at start, or once
        something is queued): its model loaded here, or its server looked at (the model there, prompt
        log-probabilities for the likelihood judge) before anything is paid for."""
        key = (served.engine, served.location)
        if self.engine is None or self.engine_key != key:
            self.close()
            self.unload()
            self.engine, self.engine_key, self.recorded = served.open(self.sessions, self.cache), key, {}
        if self.ready or not (self.eager or self.pending):
            return

        def check() -> None:
            self.engine.check()
            if served.kind == "likelihood":
                self.engine.check_likelihood()

        try:
            self.ready_up(served, check)
        except BaseException:
            self.close()
            raise
        self.ready = True

    def close(self) -> None:
        """Let the judge's engine go, and the model it loaded (the worker has stopped, or the judge changed)."""
        if self.engine is not None:
            engine, self.engine, self.engine_key, self.ready = self.engine, None, None, False
            engine.close()
            self.cache.clear()

    def drop(self, why: str) -> None:
        """Give up the queue: the requests waiting answer at once."""
        with self.changed:
            if self.pending or self.busy:
                log.warning(
                    "%s: %d queued prompts not ranked (a new retrieve queues them again)",
                    why,
                    len(self.pending) + len(self.busy),
                )
            self.pending.clear()
            self.busy = set()
            self.later.clear()
            self.changed.notify_all()

    def rank(self, served, round_: dict[int, frozenset[int]]) -> int:
        """Rank the round's prompts that no stored ranking covers: read, judge (no transaction), write."""
        from preflab.labelling.judges.table import JUDGES
        from preflab.labelling.selection import prompts_with_candidates
        from preflab.labelling.studio.backend import judge_items, store_judgements, stored_rankings

        def uncovered(session: Session, needs: dict[int, frozenset[int]]) -> set[int]:
            stored = stored_rankings(session, served.annotator, set(needs))
            return {pid for pid, shown in needs.items() if not shown <= getattr(stored.get(pid), "seen", frozenset())}

        def read(session: Session) -> list:
            todo = uncovered(session, round_)  # another process, or an earlier round, may have ranked it since
            needs_reference = JUDGES[served.kind].needs_reference
            return prompts_with_candidates(session, sorted(todo), require_reference=needs_reference) if todo else []

        items = in_transaction(self.sessions, read)
        if not items:
            return 0
        judgements = judge_items(served, items, self.cache, self.engine)

        spent = self.engine.stats.as_dict() if self.engine is not None and self.engine.stores_answers else None

        def write(session: Session) -> int:
            todo = uncovered(session, {i.prompt_id: frozenset(i.candidate_ids) for i in items})
            fresh = [(i, j) for i, j in zip(items, judgements) if i.prompt_id in todo and j is not None]
            if fresh:
                store_judgements(session, served, [i for i, _ in fresh], [j for _, j in fresh])
            if spent is not None:  # what the server was asked since the last round, on the judge's annotator
                record_spent(session, served, spent, self.recorded)
            return len(fresh)

        ranked = in_transaction(self.sessions, write)
        if spent is not None:
            self.recorded = spent
        return ranked

    def health(self) -> dict:
        from preflab.lm.engines import EngineConfig

        served = self.served
        where = (served.engine if served is not None and served.engine is not None else EngineConfig()).shown()
        engine = self.engine
        stats = {"engine_stats": engine.stats.as_dict()} if engine is not None and engine.stores_answers else {}
        return {
            "judge": served.name if served else None,
            **where,
            **stats,
            "loaded": self.loaded is not None or self.ready,
            "loading": self.loading,
            "queued": len(self.pending) + len(self.busy),
            "left_for_later": len(self.later),
            **self.loop.activity.as_dict(),
        }


def answer_predict(
    scorer: Scorer,
    sessions: sessionmaker[Session],
    base_url: str,
    project: int,
    label_config: str,
    tasks: Sequence[Any],
    budget: float | None,
) -> tuple[list, dict[str, int]]:
    """/predict's `results` within `budget` seconds (None: however long ranking takes), and what they hold:
    tasks answered from rankings already stored, ranked now, left for later (queued), and with nothing to say."""
    from preflab.labelling.studio.backend import plan_predictions, stored_rankings

    deadline = None if budget is None else time.monotonic() + budget
    plan = in_transaction(
        sessions,
        lambda s: plan_predictions(
            s, base_url, project, label_config, tasks, judge=scorer.judge, **scorer.judge_options
        ),
    )
    stale = plan.stale
    left: set[int] = set()
    if stale:
        scorer.want(stale)
        left = scorer.wait(set(stale), deadline)
        ready = set(stale) - left
        if ready:
            plan.rankings.update(in_transaction(sessions, lambda s: stored_rankings(s, plan.served.annotator, ready)))
        if left:
            scorer.leave(left)
    results = plan.results(leave=left)
    counts = {"stored": 0, "ranked": 0, "later": 0, "none": 0}
    for shown, result in zip(plan.shown, results):
        if result:
            counts["ranked" if shown.prompt_id in stale else "stored"] += 1
        else:
            counts["later" if shown is not None and shown.prompt_id in left else "none"] += 1
    if counts["later"]:
        log.info(
            "/predict for project %d: %d of %d tasks answered (%d from stored rankings, %d ranked now); "
            "%d left for later: %d prompts are being ranked in the background (budget %gs), the next retrieve "
            "stores them",
            project,
            counts["stored"] + counts["ranked"],
            len(tasks),
            counts["stored"],
            counts["ranked"],
            counts["later"],
            len(left),
            budget,
        )
    return results, counts
