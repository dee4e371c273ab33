"""A judge that reads nothing ranks nothing: no empty ranking is stored as valid, and a run that cannot read its
replies stops with one sentence before it spends the rest of its requests (issue 46, 1f).

The fault app answers in words where a judge wants a verdict or a score: every reply is unreadable, as
0.99 of a sampled score judge's were on a real server. Every judge kind that can fail to read (the score
judge's two methods, pairwise, likelihood, a panel) is run on it; a law holds for any judgement at all.
"""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from preflab.db.models import Annotator, Ranking, RankingItem
from tests.properties import examples

PROMPTS = 24


def write_prompts(path, n: int = PROMPTS, replies: int = 2):
    path.write_text(
        "".join(
            json.dumps(
                {
                    "prompt": f"Question {k}: why is the sky blue?",
                    "responses": [f"Answer {r} to {k}." for r in range(replies)],
                }
            )
            + "\n"
            for k in range(n)
        ),
        encoding="utf-8",
    )
    return path


def served(url: str, *more: str) -> list[str]:
    return ["--engine", "openai", "--api-base", url, "--model", "fault-model", *more, "--json"]


def valid_rankings_ranking_fewer_than_two(sessions) -> int:
    """Valid judge rankings whose items give fewer than two candidates a tier: what must never be stored."""
    with sessions.begin() as session:
        tiered = (
            select(RankingItem.ranking_id, func.count().label("n"))
            .where(RankingItem.tier.is_not(None))
            .group_by(RankingItem.ranking_id)
            .subquery()
        )
        return session.scalar(
            select(func.count())
            .select_from(Ranking)
            .outerjoin(tiered, tiered.c.ranking_id == Ranking.id)
            .where(Ranking.source == "judge", Ranking.status == "valid", func.coalesce(tiered.c.n, 0) < 2)
        )


def statuses(sessions, kind: str) -> dict[str, int]:
    with sessions.begin() as session:
        return dict(
            session.execute(
                select(Ranking.status, func.count())
                .join(Annotator, Annotator.id == Ranking.annotator_id)
                .where(Annotator.judge_kind == kind)
                .group_by(Ranking.status)
            ).all()
        )


def test_a_judge_that_reads_nothing_stops_after_its_first_batch(cli, sessions, fault_server, tmp_path):
    cli("import", "prompts", write_prompts(tmp_path / "prompts.jsonl"))
    url, faults = fault_server()  # replies are words: never "Score: n"
    args = ["judge", "score", "--method", "sampled", "--samples", "1", "--retries", "0", "--concurrency", "16"]
    result = cli(*args, *served(url)[:-1], expect_ok=False)
    # One batch (8 prompts, 16 candidates) asked, none read: it stops there, not after all 48 requests.
    assert result.exit_code == 1 and faults.asked["chat"] == 16
    message = result.output.strip()
    assert len(message.splitlines()) == 1 and message.startswith(
        "Error: the score judge (openai:fault-model) could not read 16 of the 16 candidates it judged in this run, "
        "more than --max-unreadable 0.5 allows, so it stopped asking (ranked 0 prompts, 8 abstained, 16 left); "
        "the first it could not read: no score in the reply 'word"
    )
    assert message.endswith(": check the judge's model and prompt, or raise --max-unreadable")
    assert statuses(sessions, "score") == {"skipped": 8} and valid_rankings_ranking_fewer_than_two(sessions) == 0
    with sessions.begin() as session:  # what it spent is counted, stopped or not
        (config,) = session.scalars(select(Annotator.config).where(Annotator.judge_kind == "score"))
    assert config["engine"]["requests"] == 16 and config["engine"]["runs"] == 1

    # Told to go on, it asks only for the prompts it has not judged, and ranks none of them.
    out = json.loads(cli(*args, "--max-unreadable", "1", *served(url)).stdout)
    assert (out["ranked"], out["abstained"], out["kept"], out["unscored"]) == (0, 16, 8, 32)
    assert out["engine"]["requests"] == 32 and faults.asked["chat"] == 48
    assert out["report"]["scope"] == "all runs" and out["report"]["rankings"] == 0
    assert statuses(sessions, "score") == {"skipped": 24}
    # A judge that ranked nothing is no judge to trust, and says so.
    assert json.loads(cli("stats", "--judges", "--json").stdout)["judges"] == []
    bad = cli("judge", "score", "--max-unreadable", "2", *served(url), expect_ok=False)
    assert bad.exit_code != 0 and "--max-unreadable is a share between 0 and 1, got 2.0" in bad.output


JUDGED_BY = {  # kind: its command's arguments, on a server whose every reply is unreadable to it
    "pairwise": ["pairwise"],
    "score-expected": ["score", "--method", "expected"],
    "score-sampled": ["score", "--method", "sampled", "--samples", "2", "--retries", "1"],
    "reference": ["reference", "--method", "expected"],
    "likelihood": ["likelihood"],
}


@pytest.mark.parametrize("name", list(JUDGED_BY))
def test_no_kind_of_judge_stores_a_ranking_of_nothing(cli, sessions, fault_server, tmp_path, name):
    path = tmp_path / "prompts.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {"prompt": f"Capital number {k}?", "reference": "Paris", "responses": ["Paris.", "Rome.", "Oslo."]}
            )
            + "\n"
            for k in range(2)
        ),
        encoding="utf-8",
    )
    cli("import", "prompts", path)
    # No structured output (words, no letter, no score); the likelihood judge's asks are all over the context.
    url, _ = fault_server(owned_by="someone-else", max_context=10_000 if name != "likelihood" else 40)
    out = json.loads(cli("judge", *JUDGED_BY[name], *served(url)).stdout)
    assert (out["ranked"], out["abstained"], out["unscored"]) == (0, 2, 6), name
    kind = JUDGED_BY[name][0]
    assert statuses(sessions, kind) == {"skipped": 2} and valid_rankings_ranking_fewer_than_two(sessions) == 0
    assert out["report"]["abstentions"] + out["report"]["score_attempts"] > 0  # what it could not read is counted
    text = cli("judge", *JUDGED_BY[name], *served(url)[:-1]).stdout  # a re-run: all kept, nothing asked
    assert "ranked 0 prompts, kept 2 already ranked" in text


def test_a_panel_of_judges_that_read_nothing_ranks_nothing(cli, sessions, fault_server, tmp_path):
    cli("import", "prompts", write_prompts(tmp_path / "prompts.jsonl", n=2, replies=3))
    first, _ = fault_server(model="judge-a", owned_by="someone-else")
    second, _ = fault_server(model="judge-b", owned_by="someone-else")
    out = json.loads(
        cli("judge", "pairwise", "--model", f"judge-a@{first}", "--model", f"judge-b@{second}", "--json").stdout
    )
    assert [(m["ranked"], m["abstained"]) for m in out["members"]] == [(0, 2), (0, 2)]
    assert (out["ranked"], out["abstained"]) == (0, 2)  # the panel reads its members' abstentions: no ranking
    assert statuses(sessions, "pairwise") == {"skipped": 6} and valid_rankings_ranking_fewer_than_two(sessions) == 0


finite = st.floats(-5, 5, allow_nan=False).map(lambda x: round(x, 3))
scores = st.lists(st.one_of(st.none(), st.just(math.nan), finite), min_size=2, max_size=5)


@settings(max_examples=examples(100))
@given(data=scores)
def test_law_a_judgement_is_a_ranking_exactly_when_it_reads_two_candidates(data):
    """Whatever a judge scores (None: not read, NaN: no number), the ranking it stores ranks exactly the
    candidates it read, best first, and is valid only when it orders two or more."""
    from preflab.labelling.judges.base import ranks, read_scores

    judgement = (dict(enumerate(data)), {})
    read = read_scores(judgement)
    assert set(read) == {c for c, s in enumerate(data) if s is not None and not math.isnan(s)}
    assert ranks(judgement) == (len(read) >= 2)


verdicts = st.sampled_from([(0.9, 0.8), (0.1, 0.2), (0.9, 0.1), (None, 0.7), (0.6, None), (None, None)])


@settings(max_examples=examples(100))
@given(n=st.integers(2, 5), data=st.data())
def test_law_a_pairwise_candidate_is_scored_only_where_a_verdict_about_it_was_read(n, data):
    """A candidate all of whose pairs were abstentions has no score, under either aggregate: never the tie of
    everything that scoring it 0 would claim; one with any verdict (a tie included) has a score."""
    from itertools import combinations

    from preflab.labelling.judges.pairwise import rank_pairs

    ids = list(range(10, 10 + n))
    results = {pair: data.draw(verdicts) for pair in combinations(ids, 2)}
    heard = {c for pair, (a, b) in results.items() if a is not None and b is not None for c in pair}
    for aggregate in ("copeland", "bradley-terry"):
        got, _ = rank_pairs(ids, results, aggregate)
        assert {c for c, s in got.items() if s is not None} == heard


@pytest.fixture
def one_prompt(sessions):
    from preflab.db.store import ensure_candidates, ensure_prompts

    with sessions.begin() as session:
        pid = ensure_prompts(session, {"h": {"text": "Why?", "source": "test"}})["h"]
        cids = ensure_candidates(session, {(pid, f"c{k}"): {"text": f"Because {k}.", "model": "m"} for k in range(4)})
        return pid, [cids[(pid, f"c{k}")] for k in range(4)]


RUNS = itertools.count()


@settings(max_examples=examples(30))
@given(data=st.lists(st.one_of(st.none(), st.just(math.nan), finite), min_size=4, max_size=4))
def test_law_a_stored_judge_ranking_ranks_what_was_read_on_both_databases(sessions, one_prompt, data):
    from preflab.labelling.judges.base import JudgeRun, ensure_judge, write_ranking
    from preflab.labelling.selection import PromptCandidates

    pid, cids = one_prompt
    item = PromptCandidates(pid, "Why?", None, cids, [f"Because {k}." for k in range(4)])
    run = JudgeRun("score", "law", {"example": next(RUNS)})  # a judge of its own per example
    read = {c: s for c, s in zip(cids, data) if s is not None and not math.isnan(s)}
    with sessions.begin() as session:
        rid, _ = write_ranking(session, ensure_judge(session, run), run, item, (dict(zip(cids, data)), {}))
        ranking = session.get(Ranking, rid)
        tiers = ranking.tiers()
        assert ranking.status == ("valid" if len(read) >= 2 else "skipped")
        assert ranking.n_tiers == len(tiers)
        assert {c for t in tiers for c in t} == (set(read) if len(read) >= 2 else set())
        best_first = [read[t[0]] for t in tiers]
        assert best_first == sorted(best_first, reverse=True)
        assert all(abs(read[c] - read[t[0]]) <= 1e-9 for t in tiers for c in t)  # a tier holds equal scores
    assert valid_rankings_ranking_fewer_than_two(sessions) == 0
