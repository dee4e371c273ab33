"""The judges on a server (`--engine openai`), against the fault app that answers as vLLM 0.32 does.

A judge over HTTP stores its rankings as the in-process judge does with the same
probabilities; a reply that cannot be read is an abstention in `judge report`; the
likelihood judge on a server without prompt log-probabilities stops before any paid
request; the run's requests, tokens and cost are in `--json` and `stats --judges`.
"""

from __future__ import annotations

import json
import math

import pytest
from sqlalchemy import select

from preflab.db.models import Annotator
from tests.fault_app import Faults, chat_answer, rendered
from tests.labelling.judges.test_judges import ANSWERS, QUESTION, candidate_ids, judge_rankings
from tests.lm.conversations import FRANCE, rankings_file

SAY_HI = ["hi", "hello there"]


@pytest.fixture
def ranked(cli, tmp_path):
    """The question with three answers and "Say hi." with two, each ranked by a person."""
    path = tmp_path / "rankings.jsonl"
    path.write_text(
        json.dumps(
            {
                "prompt": QUESTION,
                "reference": "Paris",
                "responses": ANSWERS,
                "ranking": [[0], [1], [2]],
                "annotator": "alice",
                "id": "r1",
            }
        )
        + "\n"
        + json.dumps(
            {"prompt": "Say hi.", "responses": SAY_HI, "ranking": [[1], [0]], "annotator": "alice", "id": "r2"}
        )
        + "\n",
        encoding="utf-8",
    )
    cli("import", "rankings", path)
    return path


def served(url: str, model: str = "fault-model", *more: str) -> list[str]:
    return ["--engine", "openai", "--api-base", url, "--model", model, *more, "--json"]


def p_first(first: str, second: str, prompt=QUESTION) -> float:
    """P("A") / (P("A") + P("B")) of the fault app's verdict on this order (what the judge must read)."""
    from preflab.labelling.judges.pairwise import judge_messages

    messages = judge_messages(prompt, first, second)
    body = {
        "model": "fault-model",
        "messages": messages,
        "temperature": 0.0,
        "logprobs": True,
        "top_logprobs": 20,
        "structured_outputs": {"choice": ["A", "B"]},
    }
    top = chat_answer(body, rendered(messages, body), Faults())["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    lp = {t["token"]: t["logprob"] for t in top}
    return 1 / (1 + math.exp(lp["B"] - lp["A"]))


def without_seconds(details: dict) -> dict:
    return {k: v for k, v in details.items() if k != "seconds"}


def test_a_pairwise_judge_on_a_server_stores_what_the_in_process_judge_would(cli, sessions, ranked, fault_server):
    from preflab.labelling.judges.pairwise import rank_pairs

    url, faults = fault_server()
    out = json.loads(
        cli("judge", "pairwise", *served(url, "fault-model", "--price-in", "2.5", "--price-out", "10")).stdout
    )
    assert out["ranked"] == 2 and out["unscored"] == 0
    # 4 pairs, each asked in both orders; the price turns the tokens into money.
    engine = out["engine"]
    assert engine["requests"] == 8 == faults.asked["chat"] and engine["cache_hits"] == 0
    assert engine["cost"] == pytest.approx((engine["tokens_in"] * 2.5 + engine["tokens_out"] * 10) / 1e6, abs=1e-6)
    for prompt, texts in ((QUESTION, ANSWERS), ("Say hi.", SAY_HI)):
        ids = candidate_ids(sessions, prompt)
        (row,) = [r for r in judge_rankings(sessions, "pairwise") if set(r[4]) == set(ids.values())]
        order = sorted(texts, key=ids.get)
        results = {
            (ids[x], ids[y]): (p_first(x, y, prompt), 1 - p_first(y, x, prompt))
            for n, x in enumerate(order)
            for y in order[n + 1 :]
        }
        scores, details = rank_pairs([ids[t] for t in order], results, "copeland")
        assert {c: (s, without_seconds(d)) for c, (s, d) in row[4].items()} == {
            c: (scores[c], details[c]) for c in scores
        }
    # Asked in two waves: one ask for each prompt and reply shown first, then those that share all but their
    # second reply with one of the first wave (a server's prefix cache holds what they share).
    asked = [json.loads(body)["messages"][-1]["content"] for body in faults.bodies]
    leads = [text.split("[The Start of Assistant B")[0] for text in asked]
    assert len(set(leads[:5])) == 5 and set(leads[5:]) <= set(leads[:5]) and len(leads) == 8
    with sessions.begin() as session:
        (judge,) = session.scalars(select(Annotator).where(Annotator.judge_kind == "pairwise"))
        assert judge.name == f"judge:pairwise:{out['run_id']}:openai:fault-model"
        assert judge.model == "openai:fault-model"
        assert judge.config["engine"]["requests"] == 8 and judge.config["engine"]["runs"] == 1

    # A re-run keeps every ranking and asks nothing; a new candidate is judged against the others,
    # and the pairs asked before are read back from the store.
    again = json.loads(cli("judge", "pairwise", *served(url)).stdout)
    assert (again["ranked"], again["kept"], faults.asked["chat"]) == (0, 2, 8)
    more = ranked.parent / "more.jsonl"
    more.write_text(json.dumps({"prompt": QUESTION, "responses": ["Paris, France."]}) + "\n", encoding="utf-8")
    cli("import", "prompts", more)
    grown = json.loads(cli("judge", "pairwise", *served(url)).stdout)
    assert grown["ranked"] == 1 and grown["engine"]["cache_hits"] == 6 and grown["engine"]["requests"] == 6
    assert grown["engine_total"]["requests"] == 14 and grown["engine_total"]["runs"] == 3

    trust = json.loads(cli("stats", "--judges", "--json").stdout)["judges"]
    (row,) = [r for r in trust if r["kind"] == "pairwise"]
    # 6 + 1 candidate pairs ranked by the valid rankings; the cost of every run over them.
    assert row["cost_per_1000_pairs"] == pytest.approx(1000 * grown["engine_total"]["cost"] / 7)
    assert row["pairs_per_s"] > 0
    text = cli("stats", "--judges").stdout
    assert "$/1k pairs" in text and "pairs/s" in text


def test_a_reply_that_cannot_be_read_is_an_abstention(cli, sessions, ranked, fault_server):
    # A server that offers no structured output, whose model answers in words: no verdict to read.
    url, _faults = fault_server(owned_by="someone-else")
    out = json.loads(cli("judge", "pairwise", *served(url)).stdout)
    # A prompt where no pair was read is no ranking (not a tie of everything): stored as the judge's abstention.
    assert (out["ranked"], out["abstained"], out["report"]["abstentions"]) == (0, 2, 4)
    assert out["report"]["pairs_judged"] == 0 and out["report"]["swap_consistency"] is None
    rows = judge_rankings(sessions, "pairwise")
    assert len(rows) == 2 and {row[0] for row in rows} == {"skipped"} and all(row[3] == [] for row in rows)
    for row in rows:
        for score, details in row[4].values():
            assert score is None and details["abstentions"] == len(row[4]) - 1 and details["wins"] == 0
            assert all(
                p["outcome"] == "abstain" and p["p_as_a"] is None and p["reason"].startswith("no A or B")
                for p in details["pairs"]
            )
    graded = json.loads(cli("judge", "score", "--method", "expected", *served(url)).stdout)
    assert (graded["unscored"], graded["ranked"], graded["abstained"]) == (5, 0, 2)
    assert graded["report"]["abstentions"] == 5
    report = cli("judge", "report").stdout
    assert "4 abstentions (replies that could not be read)" in report
    assert "5 abstentions" in report


def test_likelihood_on_a_server_without_prompt_logprobs_stops_before_any_paid_request(
    cli, sessions, ranked, fault_server
):
    url, faults = fault_server(prompt_logprobs=False, echo=False)
    result = cli("judge", "likelihood", *served(url), expect_ok=False)
    assert result.exit_code != 0
    assert f"the server at {url} gives no prompt log-probabilities" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert faults.asked["chat"] == faults.asked["completions"] == 1  # the one-token probes only
    assert judge_rankings(sessions, "likelihood") == []


def test_likelihood_on_a_server_reads_each_reply_given_its_history(cli, sessions, fault_server, tmp_path):
    from tests.fault_app import token_logprob

    cli("import", "rankings", rankings_file(tmp_path / "conversations.jsonl"))
    url, faults = fault_server()
    out = json.loads(cli("judge", "likelihood", *served(url)).stdout)
    assert out["ranked"] == 2
    sent = [json.loads(body) for body in faults.bodies if "Paris." in body]
    # Each reply is asked after the whole conversation, sent as messages.
    assert [*FRANCE, {"role": "assistant", "content": "Paris."}] in [b["messages"] for b in sent]
    for row in judge_rankings(sessions, "likelihood"):
        assert all(details["tokens"] == 1 for _, details in row[4].values())
        assert sorted(score for score, _ in row[4].values()) == pytest.approx(
            [token_logprob("Paris."), token_logprob("Rome.")]
        )


def test_a_panel_ranks_by_the_majority_of_its_members(cli, sessions, ranked, fault_server, tmp_path):
    from tests.tiny_models import tiny_causal_lm

    more = tmp_path / "more.jsonl"
    more.write_text(
        json.dumps({"prompt": "Name a prime.", "responses": ["2", "7", "9", "11", "Four."]}) + "\n", encoding="utf-8"
    )
    cli("import", "prompts", more)  # 10 more pairs: the members disagree on some

    first, _ = fault_server(model="judge-a")
    second, _ = fault_server(model="judge-b")
    local = str(tiny_causal_lm(tmp_path / "local-judge"))
    out = json.loads(
        cli(
            "judge",
            "pairwise",
            "--model",
            f"judge-a@{first}",
            "--model",
            f"judge-b@{second}",
            "--model",
            local,
            "--price-in",
            "1",
            "--json",
        ).stdout
    )
    members = {m["model"]: m for m in out["members"]}
    assert len(members) == 3 and all(m["ranked"] == 3 for m in members.values())
    assert out["engine"]["requests"] == 56  # the two served members' requests, the panel's own cost
    with sessions.begin() as session:
        names = set(session.scalars(select(Annotator.model).where(Annotator.judge_kind == "pairwise")))
    (local_label,) = set(members) - {"openai:judge-a", "openai:judge-b"}
    panel = f"panel:openai:judge-a+openai:judge-b+{local_label}"
    assert names == {*members, panel}
    outcomes = outcomes_by_judge(sessions)
    outvoted = 0
    for pair, said in outcomes[panel].items():
        votes = [outcomes[m][pair] for m in members]
        # The served members are asked the same and say the same: two of three, their outcome wins.
        assert said == votes[0] == votes[1]
        outvoted += votes[2] != said
    assert outvoted  # the member in process was outvoted on some pairs
    # Two members: a decision needs both.
    two = json.loads(cli("judge", "pairwise", "--model", f"judge-a@{first}", "--model", local, "--json").stdout)
    outcomes = outcomes_by_judge(sessions)
    (pair_panel,) = [name for name in outcomes if name.startswith("panel:") and name.count("+") == 1]
    assert two["ranked"] == 3 and two["members"][0]["kept"] == 3  # members rank once, whatever the panel
    split = 0
    for pair, said in outcomes[pair_panel].items():
        a, b = outcomes["openai:judge-a"][pair], outcomes[local_label][pair]
        assert said == (a if a == b else "tie")
        split += a != b
    assert split  # some pairs had the members disagree


def outcomes_by_judge(sessions) -> dict[str, dict[tuple[str, str], str]]:
    """Each pairwise judge's outcome of each pair (first candidate's view, by the texts)."""
    from preflab.db.models import Candidate, Ranking, RankingItem

    out: dict[str, dict] = {}
    with sessions.begin() as session:
        texts = dict(session.execute(select(Candidate.id, Candidate.text)).all())
        rows = session.execute(
            select(Annotator.model, RankingItem.candidate_id, RankingItem.details)
            .join(Ranking, Ranking.id == RankingItem.ranking_id)
            .join(Annotator, Annotator.id == Ranking.annotator_id)
            .where(Annotator.judge_kind == "pairwise", Ranking.status == "valid")
        )
        for model, cid, details in rows:
            for pair in details["pairs"]:
                out.setdefault(model, {})[(texts[cid], texts[pair["vs"]])] = pair["outcome"]
    return out


def test_prefix_waves_ask_each_prompt_and_first_reply_once_then_the_rest():
    from itertools import combinations

    from preflab.labelling.judges.pairwise import prefix_waves

    pairs = [(k, i, j) for k in range(2) for i, j in combinations(range(4), 2)]
    orders = pairs + [(k, j, i) for k, i, j in pairs]
    first, rest = prefix_waves(orders)
    assert sorted(first + rest) == list(range(len(orders)))  # every ask, once
    assert sorted(orders[n][:2] for n in first) == [(k, r) for k in range(2) for r in range(4)]
    assert len(rest) == 2 * 12 - 8 and {orders[n][:2] for n in rest} <= {orders[n][:2] for n in first}
    assert prefix_waves([]) == ([], [])


def test_majority():
    from preflab.labelling.judges.panel import majority

    assert majority(["win", "win", "loss"]) == "win" and majority(["loss", "tie", "loss"]) == "loss"
    assert majority(["win", "loss", "tie"]) == "tie" and majority(["win", "tie"]) == "tie"
    assert majority(["win", "abstain", "abstain"]) == "win" and majority(["abstain", "abstain"]) == "abstain"


def test_a_score_panel_is_the_mean_of_its_members(cli, sessions, ranked, fault_server):
    first, _ = fault_server(model="judge-a")
    silent, _ = fault_server(model="judge-c", owned_by="someone-else")  # its replies name no score
    out = json.loads(
        cli(
            "judge",
            "score",
            "--method",
            "expected",
            "--model",
            f"judge-a@{first}",
            "--model",
            f"judge-c@{silent}",
            "--json",
        ).stdout
    )
    assert out["ranked"] == 2 and out["unscored"] == 0
    scored: dict[str, dict] = {}
    for row in judge_rankings(sessions, "score"):
        scored.setdefault(row[6]["run_id"], {}).update({c: s for c, (s, _) in row[4].items()})
    panel = scored[out["run_id"]]
    member_a = scored[out["members"][0]["run_id"]]
    assert panel == pytest.approx(member_a) and all(v is not None for v in panel.values())
    assert all(v is None for v in scored[out["members"][1]["run_id"]].values())


def test_sampled_grades_on_a_server_are_asked_again_where_no_score_is_read(cli, sessions, ranked, fault_server):
    url, faults = fault_server()  # its replies are words, never "Score: n"
    out = json.loads(
        cli("judge", "score", "--method", "sampled", "--samples", "2", "--retries", "1", *served(url)).stdout
    )
    # 5 candidates, 2 samples each, asked once more: every ask its own request (its own seed), none a guess.
    assert out["unscored"] == 5 and out["engine"]["requests"] == 20 == len(faults.bodies)
    assert out["report"]["parse_failure_rate"] == 1.0 and out["report"]["score_attempts"] == 20
    indices = {json.loads(body)["seed"] for body in faults.bodies}
    assert len(indices) == 4  # the seeds of samples 0-3 of the one --seed
