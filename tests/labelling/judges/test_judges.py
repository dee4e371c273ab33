"""AI judges on tiny models: rankings written as an AI annotator's, idempotent, and honest reports."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from preflab.db.models import Annotator, Candidate, Comparison, Prompt, Ranking
from tests.tiny_models import fit_completions, tiny_causal_lm, tiny_reward_model

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

QUESTION = "What is the capital of France?"
ANSWERS = ["Paris.", "London.", "It is Berlin, of course."]


def _fitted(tmp_path_factory, name, examples, steps=40, lr=1e-2):
    """A tiny causal LM taught to answer chat prompts; `examples` maps a tokenizer to (prompt, answer)s."""
    from transformers import AutoTokenizer

    path = tiny_causal_lm(tmp_path_factory.mktemp("models") / name)
    return fit_completions(path, examples(AutoTokenizer.from_pretrained(path)), steps=steps, lr=lr)


@pytest.fixture(scope="module")
def paris_lm(tmp_path_factory):
    """Says "Paris." to the question: its likelihood judge should rank that answer first."""
    from preflab.lm.loading import chat_text

    return _fitted(tmp_path_factory, "paris", lambda tok: [(chat_text(tok, QUESTION), "Paris.")])


@pytest.fixture(scope="module")
def always_a_judge(tmp_path_factory):
    """Answers "A" whatever it is shown: pure position bias."""
    from preflab.labelling.judges.pairwise import judge_text

    return _fitted(
        tmp_path_factory,
        "always-a",
        lambda tok: [
            (judge_text(tok, QUESTION, ANSWERS[0], ANSWERS[1]), "A"),
            (judge_text(tok, QUESTION, ANSWERS[1], ANSWERS[0]), "A"),
        ],
        steps=25,
    )


@pytest.fixture(scope="module")
def flaky_grader(tmp_path_factory):
    """Replies "Score: 4" about half the time and something unparseable otherwise."""
    from preflab.labelling.judges.score import grading_text
    from preflab.labelling.selection import PromptCandidates

    item = PromptCandidates(0, QUESTION, None, [0], [ANSWERS[0]])
    return _fitted(
        tmp_path_factory,
        "flaky",
        lambda tok: [
            (grading_text(tok, item, ANSWERS[0], False), "Score: 4"),
            (grading_text(tok, item, ANSWERS[0], False), "I am not sure."),
        ],
        steps=30,
    )


@pytest.fixture
def ranked_by_humans(cli, tmp_path):
    """The question with three answers, ranked Paris > London > Berlin by a person."""
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
            {
                "prompt": "Say hi.",
                "responses": ["hi", "hello there"],
                "ranking": [[1], [0]],
                "annotator": "alice",
                "id": "r2",
            }
        )
        + "\n",
        encoding="utf-8",
    )
    cli("import", "rankings", path)
    return path


def judge_rankings(sessions, kind):
    with sessions.begin() as session:
        rows = session.execute(
            select(Ranking, Annotator)
            .join(Annotator, Annotator.id == Ranking.annotator_id)
            .where(Annotator.judge_kind == kind)
        ).all()
        return [
            (
                r.Ranking.status,
                r.Ranking.source,
                r.Ranking.judge_run,
                r.Ranking.tiers(),
                {i.candidate_id: (i.score, i.details) for i in r.Ranking.items},
                r.Annotator.kind,
                r.Annotator.config,
                r.Ranking.prompt_id,
            )
            for r in rows
        ]


def candidate_ids(sessions, prompt=QUESTION):
    with sessions.begin() as session:
        return dict(
            session.execute(
                select(Candidate.text, Candidate.id)
                .join(Prompt, Prompt.id == Candidate.prompt_id)
                .where(Prompt.text == prompt)
            ).all()
        )


def test_likelihood_judge_ranks_the_answer_the_model_believes_first(cli, sessions, ranked_by_humans, paris_lm):
    out = json.loads(cli("judge", "likelihood", "--model", paris_lm, "--json").stdout)
    assert out["ranked"] == 2 and out["kept"] == 0
    ids = candidate_ids(sessions)
    rows = judge_rankings(sessions, "likelihood")
    ((status, source, run, tiers, items, kind, config, _),) = [r for r in rows if ids["Paris."] in r[4]]
    assert (status, source, kind) == ("valid", "judge", "ai") and config["run_id"] == run
    assert tiers[0] == [ids["Paris."]]
    assert items[ids["Paris."]][0] > items[ids["London."]][0]
    assert items[ids["Paris."]][1]["tokens"] > 0
    # The report compares the judge with the person on the prompts both ranked.
    agree = out["report"]["human_agreement"]
    assert agree["prompts"] == 2 and agree["shared_pairs"] == 4
    assert out["report"]["length_pairs"] == 4 and 0 <= out["report"]["longer_wins"] <= 1

    again = json.loads(cli("judge", "likelihood", "--model", paris_lm, "--json").stdout)
    assert again["ranked"] == 0 and again["kept"] == 2
    assert len(judge_rankings(sessions, "likelihood")) == 2

    # The pairs built from the judge's ranking carry its score gap as the margin.
    cli("pairs", "build", "--annotator-kind", "ai")
    with sessions.begin() as session:
        pair = session.scalars(
            select(Comparison).where(Comparison.chosen_id == ids["Paris."], Comparison.rejected_id == ids["London."])
        ).one()
        assert pair.margin == pytest.approx(items[ids["Paris."]][0] - items[ids["London."]][0], abs=1e-5)


def test_a_prompt_that_gains_candidates_is_ranked_again(cli, sessions, ranked_by_humans, paris_lm, tmp_path):
    cli("judge", "likelihood", "--model", paris_lm)
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"prompt": QUESTION, "responses": ["Paris, France."]}) + "\n", encoding="utf-8")
    cli("import", "prompts", more)
    out = json.loads(cli("judge", "likelihood", "--model", paris_lm, "--json").stdout)
    assert out["ranked"] == 1 and out["superseded"] == 1 and out["kept"] == 1
    statuses = sorted(r[0] for r in judge_rankings(sessions, "likelihood") if len(r[4]) >= 3)
    assert statuses == ["superseded", "valid"]


def test_pairwise_judge_turns_position_bias_into_ties(cli, sessions, ranked_by_humans, always_a_judge):
    out = json.loads(cli("judge", "pairwise", "--model", always_a_judge, "--json").stdout)
    report = out["report"]
    assert report["pairs_judged"] == 4  # 3 pairs for the question, 1 for "Say hi."
    assert report["first_position_rate"] == 1.0 and report["swap_consistency"] == 0.0
    for _, _, _, tiers, items, _, _, _ in judge_rankings(sessions, "pairwise"):
        assert len(tiers) == 1  # every pair a tie: one tier, no pairs for training
        for score, details in items.values():
            assert score == 0 and details["wins"] == details["losses"] == 0
            assert all(p["outcome"] == "tie" and p["p_as_a"] > 0.5 > p["p_as_b"] for p in details["pairs"])
    built = json.loads(cli("pairs", "build", "--annotator-kind", "ai", "--json").stdout)
    assert built["rankings"] == 2 and built["pairs"] == 0


def test_pair_outcomes_become_a_ranking():
    from preflab.labelling.judges.pairwise import outcome, rank_pairs

    assert outcome(0.9, 0.8) == "win" and outcome(0.1, 0.3) == "loss" and outcome(0.9, 0.2) == "tie"
    # 1 beats 2 and 3 in both orders; 2 vs 3 disagrees across orders: a tie.
    results = {(1, 2): (0.9, 0.7), (1, 3): (0.8, 0.6), (2, 3): (0.9, 0.1)}
    for aggregate in ("copeland", "bradley-terry"):
        scores, details = rank_pairs([1, 2, 3], results, aggregate)
        assert scores[1] > scores[2] and scores[1] > scores[3]
        assert scores[2] == pytest.approx(scores[3])
    assert details[1]["wins"] == 2 and details[2]["ties"] == 1 and details[3]["losses"] == 1


def test_score_judge_retries_unparseable_replies_and_never_counts_them(cli, sessions, ranked_by_humans, flaky_grader):
    out = json.loads(
        cli(
            "judge", "score", "--model", flaky_grader, "--samples", 3, "--retries", 3, "--max-new-tokens", 6, "--json"
        ).stdout
    )
    rows = judge_rankings(sessions, "score")
    assert len(rows) == 2
    failures = samples = 0
    for status, _, _, tiers, items, _, config, _ in rows:
        assert config["samples"] == 3 and config["retries"] == 3 and "prompt_sha256" in config
        for score, details in items.values():
            assert details["attempts"] == len(details["samples"]) + details["parse_failures"]
            assert set(details["samples"]) <= {4.0}  # a failure is never scored as 0
            assert score == (4.0 if details["samples"] else None)
            failures += details["parse_failures"]
            samples += len(details["samples"])
        scored = [c for c, (s, _) in items.items() if s is not None]
        # Equal means are one tier; fewer than two candidates read is no ranking: the judge's abstention.
        assert (status, tiers) == (("valid", [sorted(scored)]) if len(scored) >= 2 else ("skipped", []))
    assert (
        failures > 0
        and samples > 0
        and out["report"]["parse_failure_rate"] == pytest.approx(failures / out["report"]["score_attempts"])
    )


def test_reference_judge_grades_only_prompts_with_a_reference(cli, sessions, ranked_by_humans, flaky_grader):
    out = json.loads(
        cli(
            "judge",
            "reference",
            "--model",
            flaky_grader,
            "--samples",
            1,
            "--retries",
            0,
            "--max-new-tokens",
            4,
            "--json",
        ).stdout
    )
    assert out["prompts"] == 1 and out["ranked"] + out["abstained"] == 1
    (row,) = judge_rankings(sessions, "reference")
    assert set(row[4]) == set(candidate_ids(sessions).values())


def test_reward_model_judge_ranks_by_reward(cli, sessions, ranked_by_humans, tmp_path):
    rm = tiny_reward_model(tmp_path / "rm")
    out = json.loads(cli("judge", "reward-model", rm, "--json").stdout)
    assert out["ranked"] == 2
    for _, _, _, tiers, items, _, _, _ in judge_rankings(sessions, "reward-model"):
        flat = [c for tier in tiers for c in tier]
        scores = [items[c][0] for c in flat]
        assert scores == sorted(scores, reverse=True) and len(flat) == len(items)
    two_labels = tiny_reward_model(tmp_path / "classifier", num_labels=2)
    result = cli("judge", "reward-model", two_labels, expect_ok=False)
    assert result.exit_code == 1 and "has 2 heads (unnamed): read one with --head NAME" in result.output


def test_judge_report_lists_every_judge(cli, ranked_by_humans, paris_lm, always_a_judge):
    cli("judge", "likelihood", "--model", paris_lm)
    cli("judge", "pairwise", "--model", always_a_judge)
    report = json.loads(cli("judge", "report", "--json").stdout)
    assert {m["kind"] for m in report} == {"likelihood", "pairwise"}
    text = cli("judge", "report").output
    assert "swap consistency 0.00" in text and "agrees with humans" in text


def test_batched_scoring_equals_one_sequence_at_a_time(tmp_path):
    """Left padding, length-sorted batches and `logits_to_keep` must not change any score."""
    from preflab.lm.forward import next_token_logprobs
    from preflab.lm.loading import chat_text, load_causal_lm
    from preflab.lm.replies import reply_logprobs, split_tokens

    model, tokenizer = load_causal_lm(tiny_causal_lm(tmp_path / "lm"))
    prompts = [chat_text(tokenizer, q) for q in ("Hi", QUESTION, "Write a short poem about the sea, please.")]
    responses = ["A much longer answer than the others, with several words.", "Paris.", "x"]
    rows = [split_tokens(tokenizer, p, p + r) for p, r in zip(prompts, responses)]
    batched = reply_logprobs(model, rows, tokenizer.pad_token_id, batch_size=3)
    single = [reply_logprobs(model, [row], tokenizer.pad_token_id, batch_size=1)[0] for row in rows]
    assert [n for _, n in batched] == [n for _, n in single] and all(n > 0 for _, n in batched)
    assert [s for s, _ in batched] == pytest.approx([s for s, _ in single], abs=1e-4)
    ids = [tokenizer.convert_tokens_to_ids("A"), tokenizer.convert_tokens_to_ids("B")]
    batched = next_token_logprobs(model, tokenizer, prompts, ids, batch_size=3)
    single = [next_token_logprobs(model, tokenizer, [p], ids, batch_size=1)[0] for p in prompts]
    assert [x for row in batched for x in row] == pytest.approx([x for row in single for x in row], abs=1e-4)
