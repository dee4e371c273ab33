"""The expected-score judge on tiny models: a score from the next-token distribution, always."""

from __future__ import annotations

import json
import math

import pytest
from sqlalchemy import select

from preflab.db.models import Annotator, Candidate, Ranking
from tests.tiny_models import CORPUS, tiny_causal_lm, tiny_tokenizer

QUESTION = "What is the capital of France?"
GOOD, BAD = "Paris.", "London."


def build_grader(path, good_text: str, bad_text: str):
    """A hand-built one-layer Llama that replies "Score: 5" to `good_text` and "Score: 1" to `bad_text`.

    Training a tiny model to tell two answers apart at the end of a 500-token
    rubric takes minutes; building one takes milliseconds. The residual stream:
    dim 0 marks the tokens only one text has (+1 the good one's, -1 the bad
    one's); the attention layer (no queries or keys: it averages everything
    before) carries that verdict to dim 2; the MLP lets it through to dim 7 only
    right after ":"; dims 3-6 name the last token, and the output head reads them
    as a bigram table: end of the chat prompt -> "Score" -> ":" -> the digit the
    verdict picks ("5" or "1", with and without a space) -> end of turn.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from preflab.labelling.judges.prompts import ANSWER_START
    from preflab.labelling.judges.score import SCORE_CHOICES
    from preflab.lm.forward import choice_tokens

    tiny_causal_lm(path, num_hidden_layers=1, tie_word_embeddings=False)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    good, bad = (set(tok(t, add_special_tokens=False)["input_ids"]) for t in (good_text, bad_text))
    start, variants = choice_tokens(tok, ANSWER_START, SCORE_CHOICES)
    score_ids = [i for options in variants for i in options]
    newline = tok("\n", add_special_tokens=False)["input_ids"][-1]
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
        for norm in (
            model.model.norm,
            model.model.layers[0].input_layernorm,
            model.model.layers[0].post_attention_layernorm,
        ):
            norm.weight.fill_(1.0)
        emb, head = model.model.embed_tokens.weight, model.lm_head.weight
        emb[:, 1] = 1.0
        emb[list(good - bad), 0] = 1.0
        emb[list(bad - good), 0] = -1.0
        for dim, ids in ((3, [newline]), (4, start[:1]), (5, start[1:]), (6, score_ids)):
            emb[ids, dim] = 1.0
        attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
        attn.v_proj.weight[0, 0] = 1.0
        attn.o_proj.weight[2, 0] = 1.0
        mlp.gate_proj.weight[0, 5] = 1.0
        mlp.up_proj.weight[0, 2] = 1000.0
        mlp.down_proj.weight[7, 0] = 1.0
        head[start[0], 3] = head[start[1], 4] = head[tok.eos_token_id, 6] = 10.0
        for value, sign in ((5, 1.0), (1, -1.0)):
            head[variants[value], 7] = 10.0 * sign
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def grader(tmp_path_factory):
    """Grades "Paris." with "Score: 5" and "London." with "Score: 1"."""
    from preflab.labelling.judges.score import grading_text
    from preflab.labelling.selection import PromptCandidates

    path = tmp_path_factory.mktemp("models") / "grader"
    tok = tiny_tokenizer()
    item = PromptCandidates(0, QUESTION, None, [0], [GOOD])
    return build_grader(path, grading_text(tok, item, GOOD, False), grading_text(tok, item, BAD, False))


@pytest.fixture
def two_answers(cli, tmp_path):
    """The question with both answers, ranked Paris > London by a person."""
    path = tmp_path / "rankings.jsonl"
    path.write_text(
        json.dumps({"prompt": QUESTION, "responses": [BAD, GOOD], "ranking": [[1], [0]], "annotator": "alice"}) + "\n",
        encoding="utf-8",
    )
    cli("import", "rankings", path)


def stored(sessions, method):
    """{candidate text: (score, details)} of the score judge run by `method`."""
    with sessions.begin() as session:
        rows = session.execute(
            select(Ranking, Annotator)
            .join(Annotator, Annotator.id == Ranking.annotator_id)
            .where(Annotator.judge_kind == "score")
        ).all()
        texts = dict(session.execute(select(Candidate.id, Candidate.text)).all())
        for ranking, annotator in rows:
            if annotator.config.get("method", "sampled") == method:
                return {texts[i.candidate_id]: (i.score, i.details) for i in ranking.items}, ranking.tiers()


def test_expected_score_is_the_weighted_mean_over_the_score_mass():
    from preflab.labelling.judges.score import expected_score

    # Score 5 spelled two ways (" 5" and "5"): their probabilities add up.
    probs = {0: [0.01], 1: [0.04], 2: [0.05], 3: [0.0], 4: [0.1], 5: [0.1, 0.1]}
    variants = [[10 * v + k for k in range(len(probs[v]))] for v in range(6)]
    logprobs = [math.log(p) if p else float("-inf") for v in range(6) for p in probs[v]]
    score, details = expected_score(logprobs, variants)
    mass = 0.4
    assert details["mass"] == pytest.approx(mass)
    assert score == pytest.approx(sum(v * sum(ps) for v, ps in probs.items()) / mass)
    assert details["probs"] == pytest.approx([sum(probs[v]) / mass for v in range(6)], abs=1e-4)


def _split_digits_tokenizer():
    """A byte-level BPE that keeps every digit its own token (" 5" is a space, then "5"), as SmolLM2 does."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|pad|>"],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS * 3, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>")


@pytest.mark.parametrize("make", [tiny_tokenizer, _split_digits_tokenizer], ids=["space-joined", "digits-apart"])
def test_the_score_tokens_follow_how_the_tokenizer_spells_a_score(make):
    from preflab.labelling.judges.prompts import ANSWER_START
    from preflab.labelling.judges.score import SCORE_CHOICES
    from preflab.lm.forward import choice_tokens

    tokenizer = make()
    start, variants = choice_tokens(tokenizer, ANSWER_START, SCORE_CHOICES)
    assert tokenizer.decode(start).rstrip() == "Score:"
    for value, options in enumerate(variants):
        # The way the tokenizer itself spells "Score: <value>" is the answer start and one score token.
        spelled = tokenizer(f"Score: {value}", add_special_tokens=False)["input_ids"]
        assert spelled == [*start, options[0]]
        assert {tokenizer.decode([i]).strip() for i in options} == {str(value)}
    flat = [i for options in variants for i in options]
    assert len(flat) == len(set(flat))
    if make is tiny_tokenizer:  # " 5" is one token: "Score:5" (no space) counts too
        assert all(len(options) == 2 for options in variants)


def test_expected_judge_ranks_by_the_score_the_model_puts_its_mass_on(cli, sessions, two_answers, grader):
    out = json.loads(cli("judge", "score", "--method", "expected", "--model", grader, "--json").stdout)
    assert out["ranked"] == 1 and out["unscored"] == 0
    items, tiers = stored(sessions, "expected")
    (good, good_details), (bad, bad_details) = items[GOOD], items[BAD]
    assert good_details["probs"].index(max(good_details["probs"])) == 5
    assert bad_details["probs"].index(max(bad_details["probs"])) == 1
    assert good > 4 > 2 > bad
    for score, details in items.values():
        # The stored score is the weighted mean of the stored shares; the mass is stored with it.
        assert score == pytest.approx(sum(v * p for v, p in enumerate(details["probs"])), abs=1e-3)
        assert 0.5 < details["mass"] <= 1 and details["seconds"] > 0  # a forward pass was timed
    assert len(tiers) == 2 and len(tiers[0]) == 1
    report = out["report"]
    assert report["method"] == "expected" and report["score_mass"] > 0.5 and not report["guessing"]
    assert report["human_agreement"]["pairwise_agreement"] == 1.0
    assert report["parse_failure_rate"] is None and report["seconds_per_candidate"] > 0


def test_the_report_sets_the_two_methods_side_by_side(cli, sessions, two_answers, grader):
    cli("judge", "score", "--method", "expected", "--model", grader)
    cli("judge", "score", "--method", "sampled", "--samples", 1, "--max-new-tokens", 5, "--model", grader)
    report = {m["method"]: m for m in json.loads(cli("judge", "report", "--json").stdout)}
    assert set(report) == {"sampled", "expected"}
    assert report["expected"]["run_id"] != report["sampled"]["run_id"]
    assert report["sampled"]["score_mass"] is None and report["sampled"]["seconds_per_candidate"] > 0
    text = cli("judge", "report").output
    assert "score (expected)" in text and "score (sampled)" in text and "side by side" in text
    assert "s per candidate" in text and "score tokens take" in text


def test_a_judge_that_puts_little_mass_on_scores_is_reported_as_guessing(cli, two_answers, tmp_path):
    untrained = tiny_causal_lm(tmp_path / "random")  # spreads its mass over the whole vocabulary
    out = json.loads(cli("judge", "score", "--method", "expected", "--model", untrained, "--json").stdout)
    assert out["unscored"] == 0  # it still yields a score
    assert out["report"]["guessing"] and out["report"]["low_mass_rate"] == 1.0
    assert "the judge is guessing" in cli("judge", "report").output


def test_a_method_names_its_judge_and_sampling_settings_do_not_name_an_expected_one():
    from preflab.labelling.judges.identity import identity
    from preflab.labelling.judges.score import ScoreConfig

    sampled = identity("score", ScoreConfig())
    # A sampled judge's identity is the one it had before methods existed: it keeps its rankings.
    assert "method" not in sampled and sampled["samples"] == 3
    expected = identity("score", ScoreConfig(method="expected"))
    assert expected == identity("score", ScoreConfig(method="expected", n=7, temperature=1.3, seed=4))
    assert expected["method"] == "expected" and expected["prompt_sha256"] != sampled["prompt_sha256"]
    assert identity("score", ScoreConfig(n=7)) != sampled


@pytest.mark.parametrize("kind", ["score", "reference"])
@pytest.mark.parametrize(
    "given, named",
    [
        (["--temperature", "0.7"], "--temperature"),  # its default value, but given: it would still do nothing
        (["--n", "5"], "--samples"),
        (["--retries", "0", "--samples", "5", "--seed", "3"], "--samples, --seed, --retries"),
        (["--top-p", "0.5", "--max-new-tokens", "9"], "--top-p, --max-new-tokens"),
    ],
)
def test_sampling_options_given_with_the_expected_method_are_refused(tmp_path, kind, given, named):
    from click.testing import CliRunner

    from preflab.cli import cli as root

    db = tmp_path / "judge.db"
    result = CliRunner().invoke(
        root, ["--database-url", f"sqlite:///{db}", "judge", kind, "--method", "expected", *given]
    )
    them = "it" if "," not in named else "them"
    assert result.exit_code == 1
    assert result.output == (
        f"Error: --method expected samples nothing, so it would ignore {named}: "
        f"leave {them} out or use --method sampled\n"
    )
    assert not db.exists()  # refused before anything was opened or loaded


def test_the_expected_method_takes_the_options_it_reads(cli, sessions, two_answers, grader):
    out = json.loads(
        cli("judge", "score", "--method", "expected", "--batch-size", 1, "--model", grader, "--json").stdout
    )
    assert out["ranked"] == 1 and out["unscored"] == 0


@pytest.mark.parametrize("method", ["expected", "sampled"])
def test_items_that_number_their_candidates_alike_are_graded_apart(grader, method):
    """`train eval` numbers every item's two answers 0 and 1; each item must be graded on its own texts."""
    from preflab.labelling.judges.score import ScoreConfig
    from preflab.labelling.judges.table import JUDGES
    from preflab.labelling.selection import PromptCandidates
    from preflab.lm.loading import load_causal_lm

    model, tokenizer = load_causal_lm(grader)
    config = ScoreConfig(method=method, n=1, max_new_tokens=5, temperature=0.1)
    judge = JUDGES["score"].make(model, tokenizer, config)
    first, second = judge(
        [
            PromptCandidates(1, QUESTION, None, [0, 1], [GOOD, BAD]),
            PromptCandidates(1, QUESTION, None, [0, 1], [BAD, GOOD]),
        ]
    )
    assert first[0][0] > first[0][1] and second[0][1] > second[0][0]


def test_reading_after_a_shared_rubric_changes_no_probability(tmp_path):
    """Batches continue from one cached pass over the rubric every text shares: same numbers as full passes."""
    import torch

    from preflab.labelling.judges.prompts import ANSWER_START
    from preflab.labelling.judges.score import SCORE_CHOICES, grading_text
    from preflab.labelling.selection import PromptCandidates
    from preflab.lm.forward import choice_tokens, next_token_logprobs, shared_prefix
    from preflab.lm.loading import load_causal_lm

    model, tokenizer = load_causal_lm(tiny_causal_lm(tmp_path / "lm", seed=3))
    start, variants = choice_tokens(tokenizer, ANSWER_START, SCORE_CHOICES)
    wanted = [i for options in variants for i in options]
    answers = [GOOD, BAD, "It is Berlin, of course, as everybody knows.", "x"]
    item = PromptCandidates(0, QUESTION, None, [0], answers)
    texts = [grading_text(tokenizer, item, answer, False) for answer in answers]
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] + start for t in texts]
    assert shared_prefix(rows) > 100  # the chat template and the rubric
    batched = next_token_logprobs(model, tokenizer, texts, wanted, batch_size=3, then=start)
    for row, got in zip(rows, batched):
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([row])).logits[0, -1]
        assert got == pytest.approx(torch.log_softmax(logits.float(), -1)[wanted].tolist(), abs=1e-4)
