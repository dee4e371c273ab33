"""The transformers engine, the one path every in-process judge, generation and draw runs through (issue 47 §2).

Its numbers are held to those the in-process judges and samplers read before they ran through it
(recorded from that code on the same tiny model: `tiny_causal_lm`, seed 0), so the one path
means what the two did. Floats to 1e-6; samples, a seeded draw, exactly.
"""

from __future__ import annotations

import pytest

from preflab.lm.engines import EngineConfig, Generate, Likelihood, Logprobs, Sampling, open_engine
from tests.lm.conversations import FRANCE
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
QUESTION = "What is the capital of France?"
# log P("A"), log P("B") as the verdict's first token (each letter's spellings summed): the pairwise judge's reading.
VERDICTS = [
    (-5.804443520111474, -5.815978610651539),
    (-5.804318394538157, -5.815855834737179),
    (-5.803945335559044, -5.814663632547366),
]
# log P(score) of 0-5 after "Score: ", for "Paris." and "It is Berlin.": the expected judge's reading.
SCORES = [
    [-5.758716106410324, -5.950239458238298, -5.885727337945054, -5.9448565547771155, -5.951853063292851, -5.98960275],
    [-5.7585610209554075, -5.949918472905143, -5.885984879440476, -5.945460987264987, -5.951518055668719, -5.98913756],
]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return tiny_causal_lm(tmp_path_factory.mktemp("models") / "tiny-lm")


@pytest.fixture(scope="module")
def loaded(model_path):
    from preflab.lm.loading import load_causal_lm
    from preflab.lm.names import NamedModel

    return NamedModel("tiny", str(model_path), None, *load_causal_lm(str(model_path)))


@pytest.fixture
def engine(loaded):
    """The model already loaded (no store needed): as a job that loaded it hands it over."""
    with open_engine(EngineConfig(), model=loaded, batch_size=4) as engine:
        yield engine


def test_a_verdict_held_to_its_choices_reads_each_choices_probability(engine):
    from preflab.labelling.judges.pairwise import judge_messages
    from preflab.labelling.judges.score import SCORE_CHOICES, grading_messages
    from preflab.labelling.selection import PromptCandidates

    asked = [
        judge_messages(QUESTION, "Paris.", "Lyon, I think."),
        judge_messages(QUESTION, "Lyon, I think.", "Paris."),
        judge_messages(FRANCE, "Paris.", "Rome."),
    ]
    for answer, (a, b) in zip(engine.top_logprobs([Logprobs(m, choices=("A", "B")) for m in asked]), VERDICTS):
        assert answer.choice_logprobs(("A", "B")) == pytest.approx({"A": a, "B": b}, abs=1e-6)
        assert answer.text == "A" and answer.tokens == ["A"]  # the likelier choice is the reply
    item = PromptCandidates.of(1, QUESTION, "Paris", [1, 2], ["Paris.", "It is Berlin."])
    graded = engine.top_logprobs(
        [
            Logprobs(grading_messages(item, text, False), answer_start="Score: ", choices=SCORE_CHOICES)
            for text in item.texts
        ]
    )
    for answer, expected in zip(graded, SCORES):
        assert list(answer.choice_logprobs(SCORE_CHOICES).values()) == pytest.approx(expected, abs=1e-6)


def test_samples_and_seeded_draws_are_those_drawn_before(engine):
    asks = [Generate(p, Sampling(5, 0.8, 0.9, 7), index=i) for i, p in enumerate(["Hi", "Name a colour.", "Hi"])]
    assert [(g.text, g.tokens, g.finished) for g in engine.generate(asks)] == [
        ("PuatTdd\ufffd", 5, False),
        ("n onelongdg", 5, False),
        ("\ufffdf\ufffdfk", 5, False),
    ]
    # Best-of-n's draws: the policy's own distribution, two per prompt from one seed, with their probability.
    draws = engine.generate(
        [Generate(p, Sampling(4, 1.0, 1.0, 3, top_k=0), index=i, logprob=True) for p in ("Hi", FRANCE) for i in (0, 1)]
    )
    expected = [
        ("\ufffdlpriward", -26.23119592666626),
        ("gssponse| spi", -26.260046005249023),
        ("ten\ufffd\nvi", -25.66146183013916),
        ("\ufffd formatai correct", -25.85262107849121),
    ]
    assert [g.text for g in draws] == [text for text, _ in expected]
    assert [g.logprob for g in draws] == pytest.approx([lp for _, lp in expected], abs=1e-4)
    assert all(g.tokens == 4 for g in draws)


def test_a_begun_reply_is_continued(engine):
    from preflab.training.selfreward.prompts import draw_with

    draw = draw_with(engine, max_new_tokens=5, temperature=0.9, top_p=0.95)
    # Self-reward's writer: the few-shot request, "Task 3:" (or "Task 2:") begun for the model, one seed a batch.
    assert draw([["Name a colour.", "Hi"], ["What is 2 + 2?"]], 11) == [
        "\ufffd\ufffduate\ufffdB",
        "\ufffd di res Reply",
    ]


def test_a_replys_likelihood_is_over_its_own_tokens(engine):
    replies = [(QUESTION, "Paris."), (QUESTION, "Lyon, I think."), (FRANCE, "Rome.")]
    got = engine.likelihood([Likelihood(p, r) for p, r in replies])
    assert [r.tokens for r in got] == [3, 10, 3]
    assert [r.total for r in got] == pytest.approx([-19.9998, -65.7943, -19.8416], abs=1e-3)


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


def test_it_samples_as_generation_does(engine):
    from preflab.labelling.generation import sample_responses
    from preflab.lm.sampling import SamplingConfig

    config = SamplingConfig(n=2, temperature=0.9, top_p=0.95, max_new_tokens=12, seed=5)
    prompts = [p for p in PROMPTS for _ in range(2)]
    expected = sample_responses(engine.model, engine.tokenizer, prompts, config, seed=5)
    got = engine.generate([Generate(p, Sampling.of(config), index=i % 2) for i, p in enumerate(prompts)])
    assert got == expected
    assert engine.stats.requests == 4 and engine.stats.tokens_out == sum(g.tokens for g in expected)


def test_the_engine_names_the_model_and_says_what_it_offers(engine):
    assert engine.name == "tiny" and engine.version_id is None
    assert engine.sample_logprobs and engine.samples_top_k and not engine.stores_answers
    assert not engine.prefix_ordering and engine.concurrency == 1
    engine.check()
    assert engine.check_likelihood() and engine.spent()["cost"] == 0 and "currency" not in engine.spent()


def test_opening_resolves_and_loads_nothing_until_asked(model_path, sessions):
    from sqlalchemy import select

    from preflab.db.models import ModelVersion

    def versions() -> list[str]:
        with sessions.begin() as session:
            return list(session.scalars(select(ModelVersion.name)))

    with open_engine(EngineConfig(), sessions, model=str(model_path)) as engine:
        assert versions() == []  # opening resolves nothing
        assert engine.name == str(model_path) and versions() == [str(model_path)]  # recorded when first needed
        assert engine.version_id is not None
        engine.likelihood([Likelihood("Hi", "Hello.")])  # loaded at the first call
