"""The transformers engine answers as the in-process generator and judges compute (a tiny real model)."""

from __future__ import annotations

import pytest

from preflab.lm.engines import EngineConfig, Generate, Likelihood, Logprobs, Sampling, open_engine
from tests.tiny_models import tiny_causal_lm

PROMPTS = [
    "What is the capital of France?",
    [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "How many legs?"},
        {"role": "assistant", "content": "Eight."},
        {"role": "user", "content": "And a bee?"},
    ],
]
REPLIES = ["The capital of France is Paris.", "Six legs."]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return tiny_causal_lm(tmp_path_factory.mktemp("models") / "tiny-lm")


@pytest.fixture
def engine(model_path, sessions):
    with open_engine(EngineConfig(engine="transformers"), sessions, model=str(model_path), batch_size=4) as engine:
        yield engine


def test_it_samples_as_generation_does(engine):
    from preflab.labelling.generation import sample_responses
    from preflab.lm.sampling import SamplingConfig

    config = SamplingConfig(n=2, temperature=0.9, top_p=0.95, max_new_tokens=12, seed=5)
    prompts = [p for p in PROMPTS for _ in range(2)]
    expected = sample_responses(engine.model, engine.tokenizer, prompts, config, seed=5)
    got = engine.generate([Generate(p, Sampling.of(config), index=i % 2) for i, p in enumerate(prompts)])
    assert got == expected
    assert engine.stats.requests == 4 and engine.stats.tokens_out == sum(g.tokens for g in expected)


def test_a_reply_scores_as_the_likelihood_judge_scores_it(engine):
    from preflab.labelling.judges.likelihood import mean_logprobs

    expected = mean_logprobs(engine.model, engine.tokenizer, PROMPTS, REPLIES)
    got = engine.likelihood([Likelihood(p, r) for p, r in zip(PROMPTS, REPLIES)])
    for (mean, tokens), result in zip(expected, got):
        assert result.tokens == tokens and result.mean == pytest.approx(mean, abs=1e-4)


def test_the_first_tokens_alternatives_are_the_next_token_distribution(engine):
    from preflab.lm.forward import next_token_logprobs
    from preflab.lm.loading import chat_prompt

    results = engine.top_logprobs([Logprobs(p, top_logprobs=5, max_tokens=3) for p in PROMPTS])
    vocab = list(range(len(engine.tokenizer)))
    full = next_token_logprobs(
        engine.model, engine.tokenizer, [chat_prompt(engine.tokenizer, p) for p in PROMPTS], vocab
    )
    for result, row in zip(results, full):
        assert sorted(result.first.values(), reverse=True) == pytest.approx(sorted(row, reverse=True)[:5], abs=1e-4)
        assert 1 <= len(result.tokens) <= 3 and len(result.top) == len(result.tokens)
        # Greedy: the token said first is the likeliest one.
        assert result.first[result.tokens[0]] == max(result.first.values())


def test_the_engine_names_the_model_it_loaded(engine, model_path):
    assert engine.kind == "transformers" and engine.version_id is not None
    assert engine.stats.as_dict()["cost"] == 0
