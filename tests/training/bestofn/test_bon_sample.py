"""`preflab bon sample`: best-of-n with a tiny random policy and reward model, stored for estimation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from sqlalchemy import select

from preflab.db.models import Annotator, Candidate, ModelVersion, Prompt, Ranking
from tests.tiny_models import tiny_causal_lm, tiny_reward_model, tiny_tokenizer

pytestmark = pytest.mark.slow

PROMPTS = ["What is the capital of France?", "How many legs does a spider have?", "Write a short poem about the sea."]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("bon-models")
    tokenizer = tiny_tokenizer()
    return tiny_causal_lm(root / "policy", tokenizer=tokenizer), tiny_reward_model(root / "rm", tokenizer=tokenizer)


@pytest.fixture
def setup(sessions, models, tmp_path):
    policy, rm = models
    with sessions.begin() as session:
        session.add(ModelVersion(name="rm-tiny", kind="reward", path=str(rm)))
        session.add(ModelVersion(name="policy-tiny", kind="policy", path=str(policy)))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    return policy, rm, prompts


def test_sample_stores_every_draw_and_the_estimate_reads_them(cli, sessions, setup):
    policy, rm, prompts = setup
    n = 4
    out = json.loads(
        cli(
            "bon",
            "sample",
            "--reward-model",
            "rm-tiny",
            "--policy",
            policy,
            "--n",
            n,
            "--prompts",
            prompts,
            "--max-new-tokens",
            6,
            "--json",
        ).stdout
    )
    assert out["prompts"] == 3 and out["samples"] == 3 * n and out["kept"] == 0
    assert out["kl_bound"] == pytest.approx(math.log(n) - (n - 1) / n)
    # Beirami's estimate is read off the kept responses' own sampling probabilities.
    from preflab.training.bestofn.kl import beirami_kl_log

    kept = [s["logprob"] for s in out["selected"]]
    assert len(kept) == 3 and all(lp < 0 for lp in kept)
    assert out["kl_beirami"] == pytest.approx(float(np.mean(beirami_kl_log(kept, n))))

    from preflab.lm.loading import load_sequence_scorer
    from preflab.lm.scoring import reward_scores

    reward, tokenizer = load_sequence_scorer(str(rm), device="cpu")
    with sessions.begin() as session:
        annotator = session.scalar(select(Annotator).where(Annotator.name == "rm-tiny"))
        assert annotator.kind == "ai"
        rankings = session.scalars(select(Ranking).where(Ranking.annotator_id == annotator.id)).all()
        assert len(rankings) == 3 and {r.status for r in rankings} == {"valid"}
        for ranking in rankings:
            items = ranking.items
            assert sum(i.details["copies"] for i in items) == n  # every draw accounted for
            candidates = {
                c.id: c
                for c in session.scalars(select(Candidate).where(Candidate.id.in_([i.candidate_id for i in items])))
            }
            prompt = candidates[items[0].candidate_id].prompt.text
            texts = [candidates[i.candidate_id].text for i in items]
            # The stored score is the reward model's score of (prompt, response).
            rescored = reward_scores(reward, tokenizer, [prompt] * len(texts), texts)
            assert [i.score for i in items] == pytest.approx(rescored, abs=1e-4)
            # The kept response is a top-scoring one, and tier 0 holds the top score.
            chosen = [i for i in items if i.details["selected"]]
            assert len(chosen) == 1 and chosen[0].score == max(i.score for i in items)
            assert chosen[0].tier == 0
            kept = next(s for s in out["selected"] if s["candidate_id"] == chosen[0].candidate_id)
            assert kept["logprob"] == pytest.approx(chosen[0].details["logprob"])
            assert kept["mean_score"] == pytest.approx(sum(i.score * i.details["copies"] for i in items) / n, abs=1e-5)
            for item in items:
                sampling = candidates[item.candidate_id].sampling
                assert sampling["best_of"] == n and sampling["temperature"] == 1.0
                assert sampling["logprob"] == pytest.approx(item.details["logprob"]) and sampling["logprob"] <= 0
                assert candidates[item.candidate_id].model == str(policy.resolve())

    est = json.loads(cli("bon", "estimate", "--from-db", "--proxy", "rm-tiny", "--n", "1,2,4", "--json").stdout)
    assert est["groups"] == [3, 3, 3]
    assert est["proxy"][0] == pytest.approx(np.mean([s["mean_score"] for s in out["selected"]]), abs=1e-6)
    assert est["proxy"][2] == pytest.approx(np.mean([s["score"] for s in out["selected"]]), abs=1e-6)
    assert out["estimate"]["proxy"] == pytest.approx(est["proxy"])

    again = json.loads(
        cli(
            "bon",
            "sample",
            "--reward-model",
            "rm-tiny",
            "--policy",
            policy,
            "--n",
            n,
            "--prompts",
            prompts,
            "--max-new-tokens",
            6,
            "--json",
        ).stdout
    )
    assert again["prompts"] == 0 and again["kept"] == 3  # same settings: nothing sampled twice
    reseeded = json.loads(
        cli(
            "bon",
            "sample",
            "--reward-model",
            "rm-tiny",
            "--policy",
            policy,
            "--n",
            n,
            "--prompts",
            prompts,
            "--max-new-tokens",
            6,
            "--seed",
            1,
            "--json",
        ).stdout
    )
    assert reseeded["prompts"] == 3 and reseeded["superseded"] == 3
    with sessions.begin() as session:
        valid = session.scalars(select(Ranking).where(Ranking.status == "valid")).all()
        assert len(valid) == 3


def test_logprob_is_the_sampling_probability(models):
    """With temperature 1 and no truncation, a draw's log-probability is the policy's own."""
    import torch

    from preflab.lm.engines import open_engine
    from preflab.lm.loading import chat_text, load_causal_lm
    from preflab.lm.names import NamedModel
    from preflab.training.bestofn.config import BON_DEFAULTS, BonSampleConfig
    from preflab.training.bestofn.draw import draw

    policy, _ = models
    model, tokenizer = load_causal_lm(str(policy), device="cpu")
    config = BonSampleConfig(**{**BON_DEFAULTS, "n": 3, "max_new_tokens": 5})  # temperature 1, no truncation
    engine = open_engine(model=NamedModel("policy", str(policy), None, model, tokenizer), batch_size=3)
    (samples,), (seed,) = draw(engine, [(1, PROMPTS[0])], config)
    # The same draw again, its token ids kept: the engine samples the prompt's n rows from the batch's seed.
    text = chat_text(tokenizer, PROMPTS[0])
    prompt_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    torch.manual_seed(seed)
    with torch.inference_mode():
        drawn = model.generate(
            torch.tensor([prompt_ids] * 3), do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=5
        )
    for sample, row in zip(samples, drawn[:, len(prompt_ids) :].tolist()):
        token_ids = row[: sample.tokens]
        ids = torch.tensor([prompt_ids + token_ids])
        with torch.no_grad():
            logps = model(input_ids=ids).logits[0, :-1].float().log_softmax(-1)
        want = sum(logps[len(prompt_ids) - 1 + i, t].item() for i, t in enumerate(token_ids))
        assert sample.logprob == pytest.approx(want, abs=1e-4)
        assert tokenizer.decode(token_ids, skip_special_tokens=True).strip() == sample.text


def test_bad_reward_model_is_one_line_error(cli, setup):
    policy, _, prompts = setup
    for name, message in (
        ("nope", "no model version named 'nope'"),
        ("policy-tiny", "is a policy model, not a reward model"),
    ):
        result = cli("bon", "sample", "--reward-model", name, "--policy", policy, "--prompts", prompts, expect_ok=False)
        assert result.exit_code != 0
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and message in lines[0]


def test_a_multi_objective_reward_model_picks_by_the_head_asked(cli, sessions, models, tmp_path):
    """`--head`: the draws are scored by that head (a plain forward pass here says what it reads), their rankings
    and the estimate are of its criterion; without it a model of two heads is one sentence."""
    from tests.tiny_models import two_head_reward_model

    policy, _ = models
    heads = two_head_reward_model(tmp_path / "heads", tokenizer=tiny_tokenizer())
    with sessions.begin() as session:
        session.add(ModelVersion(name="rm-heads", kind="reward", path=str(heads)))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS[:2]))
    args = ["bon", "sample", "--reward-model", "rm-heads", "--policy", policy, "--n", 4, "--prompts", prompts]
    neither = cli(*args, "--max-new-tokens", 6, expect_ok=False)
    assert neither.exit_code != 0
    assert "rm-heads has 2 heads (harmlessness, helpfulness): read one with --head NAME" in neither.output
    out = json.loads(cli(*args, "--max-new-tokens", 6, "--head", "helpfulness", "--json").stdout)
    assert out["prompts"] == 2 and set(out["estimate"]["groups"]) == {2}  # the estimate reads helpfulness's

    from preflab.lm.loading import load_sequence_scorer
    from preflab.lm.scoring import reward_vectors

    reward, tokenizer = load_sequence_scorer(str(heads), device="cpu", heads=True)
    with sessions.begin() as session:
        annotator = session.scalar(select(Annotator).where(Annotator.name == "rm-heads"))
        rankings = session.scalars(select(Ranking).where(Ranking.annotator_id == annotator.id)).all()
        assert len(rankings) == 2 and {r.criterion for r in rankings} == {"helpfulness"}
        for ranking in rankings:
            prompt = session.get(Prompt, ranking.prompt_id).text
            texts = {i.candidate_id: session.get(Candidate, i.candidate_id).text for i in ranking.items}
            vectors = reward_vectors(reward, tokenizer, [prompt] * len(texts), list(texts.values()))
            for item, vector in zip(ranking.items, vectors):
                assert item.score == pytest.approx(round(vector[1], 6), abs=1e-4)  # the helpfulness head
            (selected,) = [i for i in ranking.items if i.details["selected"]]
            assert selected.score == max(i.score for i in ranking.items)  # the best by that head is kept

    # A rule over the heads: each draw scored by its place among its prompt's draws; the ranking is the one order
    from preflab.db.export.heads import combine_group, heads_rule

    rule = "lexicographic:harmlessness,helpfulness"
    out = json.loads(cli(*args, "--max-new-tokens", 6, "--combine", rule, "--seed", 1, "--json").stdout)
    assert out["prompts"] == 2
    names = ["harmlessness", "helpfulness"]
    with sessions.begin() as session:
        annotator = session.scalar(select(Annotator).where(Annotator.name == "rm-heads"))
        rankings = session.scalars(
            select(Ranking).where(
                Ranking.annotator_id == annotator.id, Ranking.criterion == "overall", Ranking.status == "valid"
            )
        ).all()
        assert len(rankings) == 2
        for ranking in rankings:
            prompt = session.get(Prompt, ranking.prompt_id).text
            drawn = [(i, session.get(Candidate, i.candidate_id).text) for i in ranking.items]
            group = [text for item, text in drawn for _ in range(item.details["copies"])]  # the N draws
            places = combine_group(
                heads_rule(rule, names), names, reward_vectors(reward, tokenizer, [prompt] * len(group), group)
            )
            by_text = dict(zip(group, places))
            assert [item.score for item, _ in drawn] == pytest.approx([by_text[text] for _, text in drawn], abs=1e-6)
