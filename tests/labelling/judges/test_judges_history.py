"""Every judge judges the continuation given the whole conversation: its system prompt and earlier turns."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from preflab.db.conversation import transcript
from preflab.db.models import Annotator, Candidate, Prompt, Ranking, RankingItem
from tests.lm.conversations import (
    FRANCE,
    ITALY,
    rankings_file,
    recorded_inputs,
    shown_history,
    tutor_lm,  # noqa: F401 (fixture)
)
from tests.tiny_models import tiny_reward_model

SEVERAL_TURNS = [
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "Are you sure?"},
    {"role": "assistant", "content": "Yes, Paris."},
]


@pytest.fixture(scope="module")
def judge_models(tmp_path_factory, tutor_lm):
    """A causal LM that answers each conversation by its history, a reward model and a pair ranker."""
    from preflab.lm.pair_ranker import write_format

    root = tmp_path_factory.mktemp("judges")
    ranker = tiny_reward_model(root / "ranker", seed=1, initializer_range=0.5)  # probabilities far from ½
    write_format(ranker, max_length=None)
    return {"lm": tutor_lm, "rm": tiny_reward_model(root / "rm"), "ranker": ranker}


def load(kind: str, models):
    from preflab.labelling.judges.table import JUDGES
    from preflab.lm.loading import load_causal_lm, load_sequence_scorer

    if not JUDGES[kind].scorer:
        return load_causal_lm(models["lm"], device="cpu")
    return load_sequence_scorer(models["ranker" if kind == "pair-ranker" else "rm"], device="cpu")


def judged(sessions, kind: str) -> dict[tuple[str, str], tuple[float | None, dict]]:
    """(country of the conversation, candidate text) -> (score, details) of the judge's rankings."""
    with sessions.begin() as session:
        rows = session.execute(
            select(Prompt.messages, Candidate.text, RankingItem.score, RankingItem.details)
            .join(Ranking, Ranking.id == RankingItem.ranking_id)
            .join(Annotator, Annotator.id == Ranking.annotator_id)
            .join(Prompt, Prompt.id == Ranking.prompt_id)
            .join(Candidate, Candidate.id == RankingItem.candidate_id)
            .where(Annotator.judge_kind == kind)
        ).all()
    return {
        (messages[0]["content"].split()[-1].rstrip("."), text): (score, details)
        for messages, text, score, details in rows
    }


CONFIGS = {
    "score-sampled": ("score", {"method": "sampled", "n": 1, "max_new_tokens": 4, "retries": 0}),
    "score-expected": ("score", {"method": "expected"}),
    "reference": ("reference", {"method": "expected"}),
    "pairwise": ("pairwise", {}),
    "likelihood": ("likelihood", {}),
    "reward-model": ("reward-model", {}),
    "pair-ranker": ("pair-ranker", {}),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_each_judge_feeds_its_model_the_whole_conversation(cli, sessions, judge_models, tmp_path, name):
    from preflab.labelling.judges.run import judge_candidates
    from preflab.labelling.judges.table import JUDGES

    kind, settings = CONFIGS[name]
    cli("import", "rankings", rankings_file(tmp_path / "rankings.jsonl"))
    model, tokenizer = load(kind, judge_models)
    with recorded_inputs(model, tokenizer) as seen:
        summary = judge_candidates(sessions, kind, model, tokenizer, kind, JUDGES[kind].config(**settings))
    # Both prompts judged (a tiny sampled grader may read no score: an abstention, judged all the same).
    assert summary.ranked + summary.abstained == 2
    for turns in (FRANCE, ITALY):
        # One sequence the model read holds every message of the conversation, the system prompt first.
        assert any(all(content in text for content in shown_history(turns)) for text in seen), name
        if JUDGES[kind].prompt is not None:  # a judge prompt shows the conversation as its transcript
            assert any(transcript(turns) in text for text in seen), name
        else:  # the reply is read after the chat template's rendering of the history
            assert any("<|im_start|>system\n" + turns[0]["content"] in text for text in seen), name


def test_the_likelihood_judge_scores_a_reply_by_its_history(cli, sessions, judge_models, tmp_path):
    from preflab.labelling.judges.likelihood import LikelihoodConfig
    from preflab.labelling.judges.run import judge_candidates

    cli("import", "rankings", rankings_file(tmp_path / "rankings.jsonl"))
    model, tokenizer = load("likelihood", judge_models)
    judge_candidates(sessions, "likelihood", model, tokenizer, "tutor", LikelihoodConfig())
    scores = {key: score for key, (score, _) in judged(sessions, "likelihood").items()}
    # The same reply to the same last message: likely after France's history, unlikely after Italy's.
    assert scores["France", "Paris."] > scores["France", "Rome."]
    assert scores["Italy", "Rome."] > scores["Italy", "Paris."]
    assert scores["France", "Paris."] > scores["Italy", "Paris."] + 1


@pytest.mark.parametrize("kind", ["reward-model", "pair-ranker"])
def test_scorer_judges_score_the_same_replies_differently_under_another_history(
    cli, sessions, judge_models, tmp_path, kind
):
    from preflab.labelling.judges.run import judge_candidates
    from preflab.labelling.judges.table import JUDGES

    cli("import", "rankings", rankings_file(tmp_path / "rankings.jsonl"))
    model, tokenizer = load(kind, judge_models)
    judge_candidates(sessions, kind, model, tokenizer, kind, JUDGES[kind].config())
    found = judged(sessions, kind)
    if kind == "reward-model":
        assert found["France", "Paris."][0] != found["Italy", "Paris."][0]
    else:  # P(Paris ≻ Rome) as the ranker read it after each history
        probs = {country: found[country, "Paris."][1]["pairs"][0]["p_as_a"] for country in ("France", "Italy")}
        assert probs["France"] != probs["Italy"]


def test_a_reply_of_several_turns_is_judged_as_its_turns(cli, sessions, judge_models, tmp_path):
    from preflab.labelling.judges.likelihood import LikelihoodConfig
    from preflab.labelling.judges.pairwise import PairwiseConfig
    from preflab.labelling.judges.run import judge_candidates
    from preflab.lm.loading import load_causal_lm

    cli("import", "rankings", rankings_file(tmp_path / "rankings.jsonl", responses=(SEVERAL_TURNS, "Rome.")))
    model, tokenizer = load_causal_lm(judge_models["lm"], device="cpu")
    judge_candidates(sessions, "likelihood", model, tokenizer, "tutor", LikelihoodConfig())
    with recorded_inputs(model, tokenizer) as seen:
        judge_candidates(sessions, "pairwise", model, tokenizer, "tutor", PairwiseConfig())
    longer = transcript(SEVERAL_TURNS)
    assert any(transcript(FRANCE) in text and longer in text for text in seen)
    # The likelihood judge scores the assistant's turns, each given everything before it: not the user's.
    ((score, details),) = [
        v for (country, text), v in judged(sessions, "likelihood").items() if country == "France" and text == longer
    ]
    tokens = sum(
        len(tokenizer(t["content"], add_special_tokens=False)["input_ids"])
        for t in SEVERAL_TURNS
        if t["role"] == "assistant"
    )
    assert details["tokens"] == tokens and score is not None
