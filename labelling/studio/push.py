"""`ls push`: one Label Studio task per prompt (per pair of candidates for pairwise).

Label Studio's List cannot shuffle, so preflab shuffles each task's candidates
itself, seeded by the task's identity (the same task always gets the same
order), and stores the order shown in `LSTask.shown_order`. A task is
identified by its prompt and the exact set of candidates, so pushing again
creates nothing twice, and a prompt that gained candidates gets a new task.

Gold tasks (`--gold FILE --gold-rate R`) are tasks of prompts with a known
ranking (`preflab.db.quality.gold`), built exactly like the others and mixed in among
them at seeded places, so nothing tells an annotator which ones they are.
Gold prompts get tasks only this way: enough that about R of the project's
tasks are gold.

`--select STRATEGY` (`preflab.labelling.active`) chooses which prompts' tasks go
first (with `--limit K`, the only ones pushed) and stores why in `LSTask.selection`.

A task shows the whole conversation (`task_data`): the prompt's messages, and a
reply of several turns as its turns. `prompt` holds what `ls sync` reads back: the
text of a plain prompt, as before, or the messages of a conversation.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.db.models import Candidate, LSTask, Prompt
from preflab.db.quality.gold import gold_prompt_ids, read_gold, store_gold
from preflab.errors import InputError
from preflab.labelling.active import SelectConfig
from preflab.labelling.active_store import select_prompts
from preflab.labelling.selection import PromptSelection, prompts_with_candidates, selected_prompt_ids
from preflab.labelling.studio.client import LabelStudioClient
from preflab.labelling.studio.parse import KEY_FIELD
from preflab.labelling.studio.projects import CUSTOM, ProjectInfo, find_project
from preflab.labelling.studio.task_data import candidate_id, candidate_set_hash, shown_order, task_data
from preflab.templates import shows_conversations

BATCH_TASKS = 200


@dataclass
class PlannedTask:
    prompt_id: int
    set_hash: str
    order: list[int]
    data: dict
    selection: dict | None = None  # why --select chose it


# Why a prompt gets no task: the reason as `--json` names it, and as the summary says it.
SKIP_REASONS = {"no_candidates": "no candidates", "one_candidate": "only one candidate"}


@dataclass
class PushSummary:
    created: int = 0
    existing: int = 0
    adopted: int = 0
    waiting: int = 0  # new tasks left for a later push by --limit
    gold: int = 0  # gold tasks among those created
    gold_answers: dict[str, int] = field(default_factory=dict)  # the gold file: new and unchanged answers
    task_ids: list[int] = field(default_factory=list)
    skipped: dict[str, list[int]] = field(default_factory=dict)  # reason -> prompt ids given no task

    def as_dict(self) -> dict:
        return {
            "created": self.created,
            "existing": self.existing,
            "adopted": self.adopted,
            "waiting": self.waiting,
            "gold": self.gold,
            "gold_answers": self.gold_answers,
            "skipped": {reason: len(ids) for reason, ids in self.skipped.items()},
            "skipped_prompt_ids": self.skipped,
        }


def skipped_prompts(session: Session, prompt_ids: list[int] | None = None) -> dict[str, list[int]]:
    """Prompts (every one, or those given) that cannot become a task (fewer than two candidates), by reason."""
    n = func.count(Candidate.id)
    rows = session.execute(
        select(Prompt.id, n)
        .outerjoin(Candidate, Candidate.prompt_id == Prompt.id)
        .group_by(Prompt.id)
        .having(n < 2)
        .order_by(Prompt.id)
    )
    wanted = None if prompt_ids is None else set(prompt_ids)
    out: dict[str, list[int]] = {}
    for pid, count in rows:
        if wanted is not None and pid not in wanted:
            continue
        out.setdefault("no_candidates" if count == 0 else "one_candidate", []).append(pid)
    return out


def plan_tasks(
    session: Session,
    project: ProjectInfo,
    seed: int = 0,
    limit: int | None = None,
    gold: bool = False,
    prompt_ids: list[int] | None = None,
) -> tuple[list[PlannedTask], int]:
    """The tasks the project lacks (one per prompt, or per pair of candidates for pairwise), in prompt id order.

    Returns the first `limit` of them and how many more there are. Gold prompts
    are left out, or (`gold`) are the only ones planned; `prompt_ids` keeps only those prompts.
    """
    if project.template == CUSTOM:
        raise InputError(f"project {project.project_id} was not created by preflab; push needs a preflab template")
    known = {
        (pid, h)
        for pid, h in session.execute(
            select(LSTask.prompt_id, LSTask.candidate_set_hash).where(LSTask.project_id == project.id)
        )
    }
    planned: list[PlannedTask] = []
    more = 0
    golden = gold_prompt_ids(session)
    conversations = shows_conversations(project.label_config)
    among = sorted(golden) if gold else prompt_ids
    for pc in prompts_with_candidates(session, among, min_candidates=2):
        if not gold and pc.prompt_id in golden:
            continue
        replies = {cid: pc.reply(n) for n, cid in enumerate(pc.candidate_ids)}
        sets = itertools.combinations(pc.candidate_ids, 2) if project.template == "pairwise" else [pc.candidate_ids]
        for ids in sets:
            h = candidate_set_hash(ids)
            if (pc.prompt_id, h) in known:
                continue
            if limit is not None and len(planned) >= limit:
                more += 1  # counted, not built: a small --limit stays cheap
                continue
            if pc.messages and not conversations:
                raise InputError(
                    f"project {project.project_id}'s labelling config cannot show conversations (it "
                    f"was made before preflab showed them), and prompt {pc.prompt_id} is one: push "
                    f"conversations to a project made by `preflab ls init`"
                )
            order = shown_order(ids, seed, project.project_id, pc.prompt_id)
            key = f"{pc.prompt_id}:{h}"
            planned.append(
                PlannedTask(pc.prompt_id, h, order, task_data(project.template, pc.history, order, replies, key))
            )
    return planned, more


def mix_gold(
    session: Session, project: ProjectInfo, planned: list[PlannedTask], rate: float, seed: int = 0
) -> tuple[list[PlannedTask], int]:
    """`planned` with gold tasks mixed in at seeded places; returns the tasks and how many are gold.

    Enough gold tasks are added that about `rate` of the project's tasks (those
    there and those planned) are gold, as far as the gold prompts not yet in the
    project allow. `rate` is in [0, 1): `push_tasks` checks it before anything is stored.
    """
    golden = gold_prompt_ids(session)
    if not golden:
        raise InputError("no gold answers are stored: give them with --gold FILE")
    there = session.execute(select(LSTask.prompt_id).where(LSTask.project_id == project.id)).scalars().all()
    gold_there = sum(pid in golden for pid in there)
    regular = len(there) - gold_there + len(planned)
    wanted = max(0, math.ceil(rate * regular / (1 - rate) - 1e-9) - gold_there)
    candidates, _ = plan_tasks(session, project, seed, gold=True)
    rng = random.Random(f"gold:{seed}:{project.project_id}:{len(there)}")
    chosen = rng.sample(candidates, min(wanted, len(candidates)))
    mixed = list(planned)
    for task in chosen:
        mixed.insert(rng.randint(0, len(mixed)), task)
    return mixed, len(chosen)


def choose_tasks(
    sessions: sessionmaker[Session],
    planned: list[PlannedTask],
    config: SelectConfig,
    limit: int | None,
    seed: int = 0,
    reporter: Reporter = SILENT,
) -> tuple[list[PlannedTask], int]:
    """The planned tasks of the prompts `config.select` chooses, best first, at most `limit`.

    Each keeps its selection (strategy, score, reason); returns them and how many are left.
    """
    by_prompt: dict[int, list[PlannedTask]] = {}
    for task in planned:
        by_prompt.setdefault(task.prompt_id, []).append(task)
    if not by_prompt:
        return [], 0
    choices = select_prompts(
        sessions, list(by_prompt), config, len(by_prompt) if limit is None else limit, seed=seed, reporter=reporter
    )
    chosen = []
    for choice in choices:
        for task in by_prompt[choice.prompt_id]:  # a pairwise project has a task per candidate pair
            task.selection = choice.record(config.select)
            chosen.append(task)
    chosen = chosen if limit is None else chosen[:limit]
    return chosen, len(planned) - len(chosen)


def _record(
    session: Session,
    project: ProjectInfo,
    rows: list[tuple[int, int, str, list[int]]],
    selections: list[dict | None] | None = None,
) -> None:
    if rows:  # through SQLAlchemy (not the raw bulk path): shown_order and selection are JSON columns
        session.execute(
            insert(LSTask),
            [
                {
                    "project_id": project.id,
                    "task_id": tid,
                    "prompt_id": pid,
                    "candidate_set_hash": h,
                    "shown_order": order,
                    "selection": None if selections is None else selections[n],
                }
                for n, (tid, pid, h, order) in enumerate(rows)
            ],
        )


def adopt_unrecorded(sessions: sessionmaker[Session], client: LabelStudioClient, project: ProjectInfo) -> int:
    """Record tasks a push created in Label Studio but could not record (it stopped in between)."""
    with sessions.begin() as session:
        recorded = set(session.scalars(select(LSTask.task_id).where(LSTask.project_id == project.id)))
    found: list[tuple[int, int, str, list[int]]] = []
    for page in client.iter_task_pages(project.project_id, page_size=500, fields="task_only"):
        for task in page:
            data = task.get("data") or {}
            key = data.get(KEY_FIELD)
            if task["id"] in recorded or not isinstance(key, str) or ":" not in key:
                continue
            pid, h = key.split(":", 1)
            order = [candidate_id(str(item.get("id"))) for item in data.get("items") or [] if isinstance(item, dict)]
            if pid.isdigit() and order and None not in order and candidate_set_hash(order) == h:
                found.append((task["id"], int(pid), h, order))
    if not found:
        return 0
    with sessions.begin() as session:
        # Only tasks whose candidates are this database's (another database may share the project).
        owner = dict(
            session.execute(
                select(Candidate.id, Candidate.prompt_id).where(
                    Candidate.id.in_({cid for _, _, _, order in found for cid in order})
                )
            ).all()
        )
        rows = [row for row in found if all(owner.get(cid) == row[1] for cid in row[3])]
        taken = {
            tuple(row)
            for row in session.execute(
                select(LSTask.prompt_id, LSTask.candidate_set_hash).where(LSTask.project_id == project.id)
            )
        }
        rows = [row for row in rows if (row[1], row[2]) not in taken]
        _record(session, project, rows)
    return len(rows)


def push_tasks(
    sessions: sessionmaker[Session],
    client: LabelStudioClient,
    project_id: int | None,
    *,
    seed: int = 0,
    limit: int | None = None,
    gold: str | Path | None = None,
    gold_rate: float | None = None,
    selection: SelectConfig | None = None,
    prompts: PromptSelection | None = None,
    batch_tasks: int = BATCH_TASKS,
    reporter: Reporter = SILENT,
) -> tuple[ProjectInfo, PushSummary]:
    """The `ls push` job: create the tasks the project lacks, a batch per request and transaction.

    Args:
        project_id: the Label Studio project (default: the only one preflab knows on the server).
        seed: seeds each task's shuffle of its candidates.
        limit: push at most this many new tasks (gold tasks come on top).
        gold: a gold file (`preflab.db.quality.gold`): its answers are stored before anything is pushed.
        gold_rate: the share of the project's tasks to make gold tasks (0.05 when only `gold` is given).
        selection: choose the prompts to push by a strategy (`preflab.labelling.active`); `limit` caps it.
        prompts: only these prompts (by id, split or source, as `generate` chooses them); `limit` counts tasks.
    """
    choosing = selection is not None and selection.select is not None
    if gold_rate is not None and not 0 <= gold_rate < 1:
        raise InputError(f"--gold-rate must be at least 0 and below 1, not {gold_rate}")
    records = read_gold(gold) if gold is not None else None  # a bad file stops here, before anything is written
    with sessions.begin() as session:
        project = find_project(session, client.base_url, project_id)
        prompt_ids = None if prompts is None else selected_prompt_ids(session, prompts)
    summary = PushSummary()
    if records is not None:
        with sessions.begin() as session:
            summary.gold_answers = store_gold(session, records, origin=Path(gold).name).as_dict()
        gold_rate = 0.05 if gold_rate is None else gold_rate
    summary.adopted = adopt_unrecorded(sessions, client, project)
    with sessions.begin() as session:
        planned, summary.waiting = plan_tasks(
            session, project, seed, None if choosing else limit, prompt_ids=prompt_ids
        )
    if choosing:  # outside a transaction: it may load and run reward models
        planned, summary.waiting = choose_tasks(sessions, planned, selection, limit, seed, reporter)
    with sessions.begin() as session:
        if gold_rate is not None:
            planned, summary.gold = mix_gold(session, project, planned, gold_rate, seed)
        summary.skipped = skipped_prompts(session, prompt_ids)
        summary.existing = session.scalar(select(func.count()).where(LSTask.project_id == project.id))
    with reporter.progress("pushing tasks", len(planned)) as advance:
        for start in range(0, len(planned), batch_tasks):
            batch = planned[start : start + batch_tasks]
            ids = client.import_tasks(project.project_id, [t.data for t in batch])
            with sessions.begin() as session:
                _record(
                    session,
                    project,
                    [(tid, t.prompt_id, t.set_hash, t.order) for tid, t in zip(ids, batch)],
                    [t.selection for t in batch],
                )
            summary.created += len(ids)
            summary.task_ids.extend(ids)
            advance(len(batch))
    return project, summary
