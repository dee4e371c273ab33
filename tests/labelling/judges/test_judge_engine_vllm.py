"""The judges on a real vLLM server (tests/vllm_server.py) mean what they mean in process.

The server and the in-process judge read the same converted SmolLM2-135M-Instruct folder:
likelihood scores agree within 1e-3 per token, greedy pairwise verdicts on at least 0.95 of
the pairs, a conversation is judged with its history, and a panel ranks from its members.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from preflab.db.models import Annotator, Candidate, Prompt, Ranking, RankingItem
from tests.lm.conversations import FRANCE, ITALY, rankings_file

# A judge's numbers on the engines do not pass through the store's SQL: on SQLite only (the rankings' writer is
# tested on both databases in tests/db).
pytestmark = [pytest.mark.slow, pytest.mark.one_database]

FACTS = [
    (
        "What is the capital of France?",
        ["The capital of France is Paris.", "The capital of France is London.", "It is Lyon."],
    ),
    (
        "How many legs does a spider have?",
        ["A spider has eight legs.", "A spider has six legs.", "Spiders have ten legs."],
    ),
    ("What do bees make?", ["Bees make honey.", "Bees make milk.", "Bees make silk and wax."]),
    ("What is 2 + 2?", ["2 + 2 is 4.", "2 + 2 is 5.", "Four, of course."]),
    ("Which planet is closest to the sun?", ["Mercury.", "Venus is closest.", "The Earth."]),
]


@pytest.fixture
def facts(cli, tmp_path):
    path = tmp_path / "facts.jsonl"
    path.write_text(
        "".join(
            json.dumps({"prompt": q, "responses": answers, "ranking": [[0], [1], [2]], "annotator": "alice", "id": q})
            + "\n"
            for q, answers in FACTS
        ),
        encoding="utf-8",
    )
    cli("import", "rankings", path)


def served(vllm_server, *more: str) -> list[str]:
    return ["--engine", "openai", "--api-base", vllm_server.url, "--model", vllm_server.model, *more, "--json"]


def judged(sessions, kind: str) -> dict[str, dict[tuple[str, str], tuple[float | None, dict]]]:
    """judge's model -> (the prompt's first message, candidate text) -> (score, details), valid rankings only."""
    out: dict[str, dict] = {}
    with sessions.begin() as session:
        rows = session.execute(
            select(
                Annotator.model, Prompt.text, Prompt.messages, Candidate.text, RankingItem.score, RankingItem.details
            )
            .join(Ranking, Ranking.id == RankingItem.ranking_id)
            .join(Annotator, Annotator.id == Ranking.annotator_id)
            .join(Prompt, Prompt.id == Ranking.prompt_id)
            .join(Candidate, Candidate.id == RankingItem.candidate_id)
            .where(Annotator.judge_kind == kind, Ranking.status == "valid")
        ).all()
    for model, prompt, messages, text, value, details in rows:
        out.setdefault(model, {})[((messages or [{"content": prompt}])[0]["content"], text)] = (value, details)
    return out


def test_likelihood_on_vllm_equals_the_in_process_judge_and_reads_the_history(
    cli, sessions, vllm_server, facts, tmp_path
):
    cli("import", "rankings", rankings_file(tmp_path / "conversations.jsonl"))
    local = json.loads(cli("judge", "likelihood", "--model", vllm_server.model_dir, "--json").stdout)
    remote = json.loads(cli("judge", "likelihood", *served(vllm_server)).stdout)
    assert local["ranked"] == remote["ranked"] == len(FACTS) + 2 and remote["unscored"] == 0
    by_model = judged(sessions, "likelihood")
    mine = by_model.pop(f"openai:{vllm_server.model}")
    (theirs,) = by_model.values()
    assert mine.keys() == theirs.keys()
    for key, (score, details) in mine.items():
        assert details["tokens"] == theirs[key][1]["tokens"] > 0
        assert score == pytest.approx(theirs[key][0], abs=1e-3)  # the mean per token
    # The same reply after two histories that differ before the last message: scored given each.
    france, italy = mine[FRANCE[0]["content"], "Paris."][0], mine[ITALY[0]["content"], "Paris."][0]
    assert abs(france - italy) > 1e-3 and france > italy
    # What was asked: the whole conversation, as messages, the reply its last turn.
    with sessions.begin() as session:
        from preflab.db.requests import EngineRequest

        asked = [r.request["messages"] for r in session.scalars(select(EngineRequest)) if "messages" in r.request]
    assert [*FRANCE, {"role": "assistant", "content": "Paris."}] in asked
    # Asked again, the server is asked only whether it gives prompt log-probabilities (one token): every answer
    # is stored.
    again = json.loads(cli("judge", "likelihood", *served(vllm_server)).stdout)
    assert again["kept"] == len(FACTS) + 2 and again["engine"]["requests"] == 1


def test_pairwise_on_vllm_agrees_with_the_in_process_judge(cli, sessions, vllm_server, facts):
    cli("judge", "pairwise", "--model", vllm_server.model_dir)
    remote = json.loads(
        cli("judge", "pairwise", *served(vllm_server, "--price-in", "0.1", "--price-out", "0.4")).stdout
    )
    assert remote["ranked"] == len(FACTS) and remote["engine"]["requests"] == 2 * 3 * len(FACTS)
    by_model = judged(sessions, "pairwise")
    mine = by_model.pop(f"openai:{vllm_server.model}")
    (theirs,) = by_model.values()
    same = total = 0
    for key, (_, details) in mine.items():
        for served_pair, local_pair in zip(details["pairs"], theirs[key][1]["pairs"]):
            for order in ("p_as_a", "p_as_b"):  # each greedy verdict: the answer shown first, or second
                total += 1
                same += (served_pair[order] > 0.5) == (local_pair[order] > 0.5)
    assert total == 4 * 3 * len(FACTS) and same / total >= 0.95

    # A panel of two members, the one model under two served names: each member is a judge of its own (the
    # first's answers are stored; the second is asked), and their majority is what they say where they agree.
    prices = ("--price-in", "0.1", "--price-out", "0.4")
    panel = json.loads(cli("judge", "pairwise", *served(vllm_server, "--model", vllm_server.second, *prices)).stdout)
    assert panel["ranked"] == len(FACTS)
    # The first member had ranked every prompt (it kept them); the second ranks them now, asking the server.
    assert [(m["kept"], m["ranked"]) for m in panel["members"]] == [(len(FACTS), 0), (0, len(FACTS))]
    assert panel["engine"]["requests"] == 2 * 3 * len(FACTS)
    assert panel["engine_total"]["cost"] == 2 * remote["engine_total"]["cost"] > 0  # what its members cost
    ranked = judged(sessions, "pairwise")
    first, second = f"openai:{vllm_server.model}", f"openai:{vllm_server.second}"
    agreed = [k for k, (score, _) in ranked[first].items() if ranked[second][k][0] == score]
    assert len(agreed) >= len(FACTS) - 1  # the same weights, greedy: the same verdicts but for float noise
    assert all(ranked[f"panel:{first}+{second}"][k][0] == ranked[first][k][0] for k in agreed)
    trust = json.loads(cli("stats", "--judges", "--json").stdout)["judges"]
    costs = {row["model"]: row["cost_per_1000_pairs"] for row in trust}
    assert costs[first] > 0 and costs[second] > 0 and costs[f"panel:{first}+{second}"] > 0


def test_several_criteria_at_once_on_vllm_are_held_to_the_json_schema(cli, sessions, vllm_server, facts):
    """vLLM holds each reply to the criteria's JSON schema: every score is read, one request per response."""
    out = json.loads(
        cli(
            "judge",
            "score",
            "--criteria",
            "helpfulness,truthfulness",
            "--samples",
            "1",
            "--max-new-tokens",
            "64",
            *served(vllm_server),
        ).stdout
    )
    by = {c["criterion"]: c for c in out["criteria"]}
    assert list(by) == ["helpfulness", "truthfulness"]
    assert all((c["ranked"], c["unscored"]) == (len(FACTS), 0) for c in by.values()), by
    assert by["helpfulness"]["engine"]["requests"] == 3 * len(FACTS) == by["truthfulness"]["engine"]["cache_hits"]
    assert by["truthfulness"]["engine"]["requests"] == 0
    with sessions.begin() as session:
        scores = session.execute(
            select(Ranking.criterion, RankingItem.score)
            .join(RankingItem, RankingItem.ranking_id == Ranking.id)
            .join(Annotator, Annotator.id == Ranking.annotator_id)
            .where(Annotator.judge_kind == "score")
        ).all()
    assert len(scores) == 2 * 3 * len(FACTS) and all(score in {0, 1, 2, 3, 4, 5} for _, score in scores)
