"""A judge's tie reaches Label Studio as a tie, never as an order it did not choose (issue 46, 1g).

The real Label Studio's "Retrieve predictions" asks `preflab serve`, which serves a judge's stored rankings:
one prompt whose four replies the judge tied, one where it put a reply first and tied the other three. In the
tiers template a tie is one bucket; in the pairwise template the Tie choice; the plain ranker can only show an
order, so the tied replies keep the order the task shows them in, the prediction's score is a tie's (0.5 a
step), and its result says which responses are tied.
"""

from __future__ import annotations

import json
import math

import pytest
from sqlalchemy import select

from preflab.db.models import Prompt
from preflab.templates import bucket_names
from tests.labelling.ls_fixtures import make_cli
from tests.labelling.ls_helpers import session, tasks, unique
from tests.server.test_serve_label_studio import JUDGE, serve  # noqa: F401  (fixture)

WHOLE, FIRST_THEN_TIE = [[0, 1, 2, 3]], [[2], [0, 1, 3]]
SCORES = {str(WHOLE): [0.0] * 4, str(FIRST_THEN_TIE): [0.0, 0.0, 1.0, 0.0]}


def judged_lines(template: str) -> list[dict]:
    """Two prompts with the judge's tied rankings of their replies, for a project of `template`."""
    n = 2 if template == "pairwise" else 4
    rankings = [[[0, 1]], [[0, 1]]] if template == "pairwise" else [WHOLE, FIRST_THEN_TIE]
    return [
        {
            "prompt": unique(f"question {k} ({template})?"),
            "responses": [unique(f"reply {r} to {k}") for r in range(n)],
            "ranking": tiers,
            "scores": SCORES.get(str(tiers), [0.0] * n),
            "annotator": JUDGE,
            "annotator_kind": "ai",
        }
        for k, tiers in enumerate(rankings)
    ]


def test_retrieved_predictions_keep_a_judges_tie_a_tie(ls_env, serve, tmp_path):
    database_url = f"sqlite:///{tmp_path / 'preflab.db'}"
    run = make_cli(database_url)
    lines = {template: judged_lines(template) for template in ("ranking", "ranking_tiers", "pairwise")}
    path = tmp_path / "judged.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for made in lines.values() for line in made), encoding="utf-8")
    run("import", "rankings", path)
    server = serve(database_url)  # one server, the judge's stored rankings, for the three projects
    sdk = ls_env.sdk()
    for template, made in lines.items():
        pid = json.loads(run("ls", "init", "--template", template, "--title", unique(template), "--json").stdout)[
            "project_id"
        ]
        by_prompt = {line["prompt"]: line for line in made}
        run("ls", "push", "--project", pid, "--prompt-id", prompt_ids(database_url, by_prompt))
        run("ls", "connect", server.url, "--project", pid)
        sdk.actions.create(id="retrieve_tasks_predictions", project=pid, selected_items={"all": True, "excluded": []})
        predictions = {p.task: p for p in sdk.predictions.list(project=pid)}
        pushed = [task for task in tasks(database_url) if task["prompt"] in by_prompt]
        assert sorted(predictions) == sorted(t["id"] for t in pushed), template
        buckets = bucket_names(sdk.projects.get(pid).label_config)
        for task in pushed:
            line = by_prompt[task["prompt"]]
            tiers = [[task["shown"][task["texts"].index(line["responses"][i])] for i in t] for t in line["ranking"]]
            check(template, predictions[task["id"]], task["shown"], tiers, buckets)


def prompt_ids(database_url: str, texts) -> str:
    with session(database_url) as s:
        return ",".join(str(i) for i in s.scalars(select(Prompt.id).where(Prompt.text.in_(list(texts)))))


def check(template: str, got, shown: list[int], tiers: list[list[int]], buckets) -> None:
    ids = [f"c{c}" for c in shown]
    if template == "pairwise":
        assert got.result[0]["value"] == {"choices": ["Tie"]} and got.score == 0.5
        return
    ranker = got.result[0]["value"]["ranker"]
    if template == "ranking_tiers":  # each tie one bucket, its replies in the order shown
        assert ranker[buckets[0]] == [f"c{c}" for c in shown if c in tiers[0]]
        assert len(tiers) == 1 or ranker[buckets[1]] == [f"c{c}" for c in shown if c in tiers[1]]
        return
    note = got.result[0]["meta"]["text"][0]
    if len(tiers) == 1:  # all tied: the order shown, a tie's score, and said so
        assert ranker["rank"] == ids and got.score == 0.5
        assert note.startswith("A tie: the judge found all 4 responses equally good. They are in the order shown")
        return
    (best,) = tiers[0]  # the one it put first, then the tied three in the order shown
    assert ranker["rank"] == [f"c{best}"] + [c for c in ids if c != f"c{best}"]
    tied = [n + 1 for n, c in enumerate(shown) if c != best]
    assert note == (
        f"A tie: the judge found responses {tied[0]}, {tied[1]} and {tied[2]} equally good. "
        "They keep the order shown, not ranked."
    )
    assert got.score == pytest.approx((1 / (1 + math.exp(-1)) + 0.5 + 0.5) / 3, abs=1e-3)
