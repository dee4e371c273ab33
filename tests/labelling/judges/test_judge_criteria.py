"""Judges asked about one criterion (`--criterion`): the rubric in the prompt, the criterion on the rankings.

On a server (the fault app, which answers as vLLM does), on SQLite and Postgres: the pairwise and score
judges put the criterion's rubric into the prompt they send; their rankings carry the criterion and its
description is stored; a judge asked about a criterion is an annotator of its own (its identity names the
criterion and the rubric's hash), while one asked `overall` keeps the identity it had before criteria; a
re-run asks nothing again; rubrics of your own come from TOML, and a bad one is one sentence.
"""

from __future__ import annotations

import json

from sqlalchemy import select

from preflab.db.models import Annotator, Criterion, Ranking
from preflab.labelling.judges.criteria import BUILT_IN
from tests.labelling.judges.test_judge_engine import ranked, served  # noqa: F401 (a fixture)


def judged(sessions, kind: str) -> list[tuple[str, str, str]]:
    """(annotator name, criterion, status) of each ranking of the `kind` judges."""
    with sessions.begin() as s:
        return s.execute(
            select(Annotator.name, Ranking.criterion, Ranking.status)
            .join(Annotator, Annotator.id == Ranking.annotator_id)
            .where(Annotator.judge_kind == kind)
            .order_by(Ranking.id)
        ).all()


def test_a_judge_asked_about_a_criterion_says_so_and_its_rankings_carry_it(cli, sessions, ranked, fault_server):
    from preflab.labelling.judges.identity import identity
    from preflab.labelling.judges.pairwise import PairwiseConfig

    url, faults = fault_server()
    overall = json.loads(cli("judge", "pairwise", *served(url)).stdout)
    sent = len(faults.bodies)  # the distinct request bodies, in the order first received
    safe = json.loads(cli("judge", "pairwise", "--criterion", "harmlessness", *served(url)).stdout)
    assert (overall["ranked"], safe["ranked"]) == (2, 2) and safe["criterion"] == "harmlessness"
    # its measures are of its own criterion's rankings (the trust row of harmlessness)
    assert safe["report"]["criterion"] == "harmlessness" and safe["report"]["pairs_judged"] == 4
    assert safe["run_id"] != overall["run_id"]
    # the overall judge's identity is what it was before criteria: nothing about a criterion in it
    assert set(identity("pairwise", PairwiseConfig())) == {"aggregate", "prompt_sha256"}
    asked = [json.loads(body)["messages"][0]["content"] for body in list(faults.bodies)[sent:]]
    assert asked and all("by one criterion only, harmlessness" in a and BUILT_IN["harmlessness"] in a for a in asked)
    assert not any("harmlessness" in json.loads(b)["messages"][0]["content"] for b in list(faults.bodies)[:sent])

    rows = judged(sessions, "pairwise")
    assert sorted({(criterion, status) for _, criterion, status in rows}) == [
        ("harmlessness", "valid"),
        ("overall", "valid"),
    ]
    assert len({name for name, criterion, _ in rows if criterion == "harmlessness"}) == 1
    with sessions.begin() as s:
        assert s.get(Criterion, "harmlessness").description == BUILT_IN["harmlessness"]

    again = json.loads(cli("judge", "pairwise", "--criterion", "harmlessness", *served(url)).stdout)
    assert (again["ranked"], again["kept"], again["run_id"]) == (0, 2, safe["run_id"])

    graded = json.loads(
        cli("judge", "score", "--method", "expected", "--criterion", "helpfulness", *served(url)).stdout
    )
    assert graded["ranked"] == 2
    (text,) = [m["content"] for m in json.loads(list(faults.bodies)[-1])["messages"] if m["role"] == "user"]
    assert text.startswith("Judge the response by one criterion only, helpfulness") and "Score:" in text
    assert {criterion for _, criterion, _ in judged(sessions, "score")} == {"helpfulness"}


def test_rubrics_of_your_own_come_from_toml_and_a_bad_one_is_one_sentence(
    cli,
    sessions,
    ranked,
    fault_server,
    tmp_path,
):
    url, faults = fault_server()
    rubrics = tmp_path / "criteria.toml"
    rubrics.write_text('[concision]\ndescription = "Which reply says it in {fewer} words."\n', encoding="utf-8")
    out = json.loads(
        cli("judge", "pairwise", "--criterion", "concision", "--criteria-file", rubrics, *served(url)).stdout
    )
    assert out["ranked"] == 2
    assert "Which reply says it in {fewer} words." in json.loads(list(faults.bodies)[-1])["messages"][0]["content"]
    with sessions.begin() as s:
        assert s.get(Criterion, "concision").description == "Which reply says it in {fewer} words."

    unknown = cli("judge", "pairwise", "--criterion", "wit", *served(url), expect_ok=False)
    assert unknown.exit_code != 0 and len(unknown.output.strip().splitlines()) == 1
    assert "no rubric for the criterion 'wit': give one of harmlessness, helpfulness" in unknown.output
    rubrics.write_text("[concision]\nrubric = 1\n", encoding="utf-8")
    bad = cli("judge", "score", "--criterion", "concision", "--criteria-file", rubrics, *served(url), expect_ok=False)
    assert bad.exit_code != 0 and len(bad.output.strip().splitlines()) == 1
    assert "criterion 'concision' in" in bad.output and 'needs a description = "…"' in bad.output
    named = cli("judge", "score", "--criterion", "Not A Name", *served(url), expect_ok=False)
    assert named.exit_code != 0 and "--criterion must be a criterion's short name" in named.output


def test_a_panel_judges_by_a_criterion_as_its_members_do(cli, sessions, ranked, fault_server):
    first, _ = fault_server(model="judge-a")
    second, _ = fault_server(model="judge-b")
    members = ("--model", f"judge-a@{first}", "--model", f"judge-b@{second}")
    safe = json.loads(cli("judge", "pairwise", "--criterion", "harmlessness", *members, "--json").stdout)
    assert safe["ranked"] == 2 and [m["ranked"] for m in safe["members"]] == [2, 2]
    overall = json.loads(cli("judge", "pairwise", *members, "--json").stdout)
    assert overall["run_id"] != safe["run_id"] and [m["ranked"] for m in overall["members"]] == [2, 2]
    with sessions.begin() as s:
        rows = s.execute(
            select(Annotator.model, Ranking.criterion)
            .join(Annotator, Annotator.id == Ranking.annotator_id)
            .where(Annotator.judge_kind == "pairwise", Ranking.status == "valid")
        ).all()
    panel = "panel:openai:judge-a+openai:judge-b"
    for criterion in ("harmlessness", "overall"):  # each member and the panel: two prompts by each criterion
        mine = sorted(model for model, c in rows if c == criterion)
        assert mine == sorted(["openai:judge-a"] * 2 + ["openai:judge-b"] * 2 + [panel] * 2)


def test_several_criteria_at_once_are_one_json_request_per_response_on_a_server(cli, sessions, ranked, fault_server):
    from tests.fault_app import Faults, chat_answer, rendered

    url, faults = fault_server()
    out = json.loads(
        cli("judge", "score", "--criteria", "helpfulness,harmlessness", "--samples", "2", *served(url)).stdout
    )
    by = {c["criterion"]: c for c in out["criteria"]}
    assert list(by) == ["helpfulness", "harmlessness"] and all(c["ranked"] == 2 for c in by.values())
    # 5 responses, 2 samples each: 10 requests, paid by the first criterion; the second reads them back
    assert faults.asked["chat"] == 10
    assert (by["helpfulness"]["engine"]["requests"], by["helpfulness"]["engine"]["cache_hits"]) == (10, 0)
    assert (by["harmlessness"]["engine"]["requests"], by["harmlessness"]["engine"]["cache_hits"]) == (0, 10)
    drawn = {}  # response -> {criterion: [the scores the server gave, by sample]}
    for body in map(json.loads, faults.bodies):
        schema = body["structured_outputs"]["json"]
        assert schema["required"] == ["helpfulness", "harmlessness"] and not schema["additionalProperties"]
        (text,) = [m["content"] for m in body["messages"]]
        assert BUILT_IN["helpfulness"] in text and BUILT_IN["harmlessness"] in text
        response = text.split("<response>")[1].split("</response>")[0]
        answer = json.loads(
            chat_answer(body, rendered(body["messages"], body), Faults())["choices"][0]["message"]["content"]
        )
        for criterion, value in answer.items():
            drawn.setdefault(response, {}).setdefault(criterion, []).append(value)
    with sessions.begin() as s:
        from preflab.db.models import Candidate, RankingItem

        rows = s.execute(
            select(Ranking.criterion, Candidate.text, RankingItem.score, RankingItem.details)
            .join(RankingItem, RankingItem.ranking_id == Ranking.id)
            .join(Candidate, Candidate.id == RankingItem.candidate_id)
            .join(Annotator, Annotator.id == Ranking.annotator_id)
            .where(Annotator.judge_kind == "score")
        ).all()
    assert len(rows) == 2 * 5
    for criterion, text, score, details in rows:  # each criterion's score is the mean of what the server gave it
        assert sorted(details["samples"]) == sorted(drawn[text][criterion])
        assert score == sum(drawn[text][criterion]) / 2
    text = cli(
        "judge",
        "score",
        "--criteria",
        "helpfulness,harmlessness",
        "--samples",
        "2",
        "--engine",
        "openai",
        "--api-base",
        url,
        "--model",
        "fault-model",
    ).stdout
    assert "by helpfulness: kept 2" not in text and "by harmlessness: judge" in text and faults.asked["chat"] == 10


def test_several_criteria_without_structured_output_are_asked_one_by_one(cli, sessions, ranked, fault_server):
    url, faults = fault_server(owned_by="someone-else")  # no structured output: each criterion its own ask
    out = json.loads(cli("judge", "score", "--criteria", "honesty,truthfulness", "--samples", "1", *served(url)).stdout)
    assert [c["criterion"] for c in out["criteria"]] == ["honesty", "truthfulness"]
    asked = [json.loads(body) for body in faults.bodies]
    assert asked and not any("structured_outputs" in body or "response_format" in body for body in asked)
    named = [
        {c for c in ("honesty", "truthfulness") if f"by one criterion only, {c}" in body["messages"][0]["content"]}
        for body in asked
    ]
    assert all(len(n) == 1 for n in named) and set().union(*named) == {"honesty", "truthfulness"}

    both = cli("judge", "score", "--criterion", "honesty", "--criteria", "honesty", *served(url), expect_ok=False)
    assert both.exit_code != 0 and "not both" in both.output
    unknown = cli("judge", "score", "--criteria", "honesty,wit", *served(url), expect_ok=False)
    assert unknown.exit_code != 0 and "no rubric for the criterion 'wit'" in unknown.output
    second, _ = fault_server(model="judge-b")
    panel = cli(
        "judge",
        "score",
        "--criteria",
        "honesty",
        "--model",
        f"fault-model@{url}",
        "--model",
        f"judge-b@{second}",
        expect_ok=False,
    )
    assert panel.exit_code != 0 and "a panel judges one criterion at a time" in panel.output


def test_one_judge_asked_about_several_criteria_and_overall_is_one_prediction(cli, sessions, ranked, fault_server):
    """`ls predict` reads the runs of one judge, each criterion's an annotator of its own, as one prediction: each
    criterion's ranking for its ranker, the overall one for the overall ranker; another judge stays apart."""
    from preflab.db.models import Prompt
    from preflab.labelling.studio.predict import _judge_rankings, fill_rankers, ranker_criteria

    url, _ = fault_server()
    for criterion in ("overall", "helpfulness", "harmlessness"):  # three runs of the pairwise judge
        cli("judge", "pairwise", "--criterion", criterion, *served(url))
    cli("judge", "score", "--criteria", "helpfulness,harmlessness", "--samples", "2", *served(url))  # two runs more
    with sessions.begin() as s:
        kinds = dict(s.execute(select(Annotator.name, Annotator.judge_kind).where(Annotator.kind == "ai")).all())
        prompt_ids = set(s.scalars(select(Prompt.id)))
        judged = _judge_rankings(s, prompt_ids, None)
        one = next(name for name, kind in kinds.items() if kind == "pairwise")
        alone = {(n, c) for _, n, c in _judge_rankings(s, prompt_ids, one)}
        family = {n for _, n, _ in judged if ":pairwise:" in n}
        kept = {(n, c) for _, n, c in _judge_rankings(s, prompt_ids, *family)}
    assert sorted(kinds.values()) == ["pairwise"] * 3 + ["score"] * 2
    names = {name for _, name, _ in judged}
    assert len(names) == 2 and not names & set(kinds)  # one prediction a judge, named after what its runs share
    by = {name.split(":")[1]: name for name in names}
    assert by["pairwise"].endswith(":openai:fault-model") and by["score"].endswith(":openai:fault-model")
    # --judge: one run by its annotator's name, alone; one judge's runs by their prediction's name.
    assert len(alone) == 1 and next(iter(alone))[0] == one
    assert kept == {(by["pairwise"], c) for c in ("overall", "helpfulness", "harmlessness")}
    rankers = ranker_criteria(["rank_helpfulness", "rank_harmlessness", "rank"])
    prompts = {pid for pid, _, _ in judged}
    assert len(prompts) == 2
    for pid in prompts:
        pairwise, score = (
            {criterion: ranked for (p, name, criterion), ranked in judged.items() if (p, name) == (pid, by[kind])}
            for kind in ("pairwise", "score")
        )
        assert set(pairwise) == {"overall", "helpfulness", "harmlessness"} and set(score) == set(pairwise) - {"overall"}
        filled = fill_rankers(rankers, pairwise)
        assert [filled[r] for r in rankers] == [pairwise["helpfulness"], pairwise["harmlessness"], pairwise["overall"]]
        # The score judge gave no overall verdict: the overall ranker is left for the annotator.
        assert fill_rankers(rankers, score) == {
            "rank_helpfulness": score["helpfulness"],
            "rank_harmlessness": score["harmlessness"],
        }
