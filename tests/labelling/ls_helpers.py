"""Small builders shared by the Label Studio tests."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session

from preflab.db.models import Annotator, Candidate, Comparison, LSTask, Prompt, Ranking


def record_backoff(monkeypatch) -> list[float]:
    """The Label Studio client's retry waits in this process, recorded instead of slept (7.5 s before "cannot
    reach"); its module's `time` only, so no other thread's sleep is touched."""
    import preflab.labelling.studio.client as client

    waits: list[float] = []
    monkeypatch.setattr(client, "time", SimpleNamespace(sleep=waits.append))
    return waits


def write_prompts(path: Path, prompts: dict[str, list[str]]) -> Path:
    """A JSON Lines prompts file, each prompt with its candidate responses."""
    path.write_text(
        "".join(json.dumps({"prompt": p, "responses": r}) + "\n" for p, r in prompts.items()), encoding="utf-8"
    )
    return path


_calls: dict[str, itertools.count] = {}


def unique(word: str) -> str:
    """Texts unique to one test: the Label Studio server is shared by the whole run.

    Derived from the test's id and a count, not drawn at random: the same test gets the
    same texts on every run, so nothing that depends on a text (its hash, a split) varies.
    """
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
    n = next(_calls.setdefault(test, itertools.count()))
    tag = hashlib.sha256(f"{test}\0{word}\0{n}".encode()).hexdigest()[:6]
    return f"{word} [{tag}]"


def session(database_url: str) -> Session:
    from preflab.db.engine import open_database, session_factory

    return session_factory(open_database(database_url))()


def tasks(database_url: str) -> list[dict]:
    """The tasks preflab pushed: Label Studio task id, prompt text, shown order as candidate ids and texts."""
    with session(database_url) as s:
        rows = s.execute(
            select(LSTask.task_id, Prompt.text, LSTask.shown_order)
            .join(Prompt, Prompt.id == LSTask.prompt_id)
            .order_by(LSTask.task_id)
        ).all()
        texts = dict(s.execute(select(Candidate.id, Candidate.text)).all())
    return [
        {"id": tid, "prompt": prompt, "shown": list(order), "texts": [texts[c] for c in order]}
        for tid, prompt, order in rows
    ]


def item(candidate_id: int) -> str:
    return f"c{candidate_id}"


def ranker_result(value) -> list[dict]:
    return [{"from_name": "rank", "to_name": "responses", "type": "ranker", "value": {"ranker": value}}]


def rankings(database_url: str) -> list[dict]:
    """Every ranking with its annotator's name, status, version, tiers and shown order."""
    with session(database_url) as s:
        out = []
        for r in s.scalars(select(Ranking).order_by(Ranking.id)):
            out.append(
                {
                    "annotator": r.annotator.name,
                    "kind": r.annotator.kind,
                    "status": r.status,
                    "version": r.version,
                    "tiers": r.tiers(),
                    "shown": r.shown_order(),
                    "annotation": r.ls_annotation_id,
                    "task": r.ls_task_id,
                    "same_as_shown": r.same_as_shown,
                    "ls_user_id": r.annotator.ls_user_id,
                    "criterion": r.criterion,
                }
            )
        return out


def comparisons(database_url: str) -> set[tuple[str, int, int]]:
    """(annotator name, chosen candidate id, rejected candidate id) of every comparison."""
    with session(database_url) as s:
        return {
            tuple(row)
            for row in s.execute(
                select(Annotator.name, Comparison.chosen_id, Comparison.rejected_id)
                .join(Ranking, Ranking.id == Comparison.ranking_id)
                .join(Annotator, Annotator.id == Ranking.annotator_id)
            )
        }


def expected_pairs(name: str, tiers: list[list[int]]) -> set[tuple[str, int, int]]:
    return {(name, a, b) for i, upper in enumerate(tiers) for lower in tiers[i + 1 :] for a in upper for b in lower}


def personal_access_token(server, email: str) -> str:
    """A new user's personal access token (a JWT), made as they would: logged in, on My Account."""
    server.signup(email)
    password = server.users[email][1]
    with httpx.Client(base_url=server.url, timeout=60) as web:
        page = web.get("/user/login/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        answer = web.post(
            "/user/login/",
            data={"csrfmiddlewaretoken": csrf, "email": email, "password": password},
            headers={"Referer": f"{server.url}/user/login/"},
        )
        assert answer.status_code == 302, f"login of {email} failed: HTTP {answer.status_code}"
        answer = web.post("/api/token/", headers={"X-CSRFToken": web.cookies["csrftoken"], "Referer": f"{server.url}/"})
        assert answer.status_code == 201, answer.text
        return answer.json()["token"]
