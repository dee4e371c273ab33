"""The Goodhart frontier: the counting world's truth, exact points, the chart, `demo goodhart`, `bon frontier`."""

import itertools
import json
import random

import numpy as np
import pytest
from click.testing import CliRunner
from sqlalchemy import select

from preflab.cli import cli
from preflab.db.models import ModelVersion, TrainingRun
from preflab.training.goodhart import world
from preflab.training.goodhart.frontier import Point, bon_points, describe, findings, policy_point
from tests.toy_data import one_thread, toy_base, toy_store  # noqa: F401 (fixtures)


class Scores:
    """Proxy scores given as an array (prompts × outputs), read the way `world.ProxyScores` is read."""

    def __init__(self, values):
        self.values = values

    def where(self, mask):
        return np.where(mask, self.values, np.nan)


def slow_true_reward(prompt, output) -> float:
    from preflab.training.demos import toy_world as toy

    if not toy.follows_base_rule(prompt, output):
        return -1.0
    count, last = 0, prompt[-1]
    for digit in output:
        if digit != (last + 1) % 10:
            break
        count, last = count + 1, digit
    return float(count)


def test_the_true_reward_counts_on_from_the_last_input_digit_and_punishes_broken_sentences():
    rng = random.Random(0)
    for prompt in world.sample_prompts(20, seed=1):
        table = world.true_rewards(prompt)
        for _ in range(50):
            output = [rng.randrange(10) for _ in range(4)]
            assert table[world.output_index(output)] == slow_true_reward(prompt, output)
        counting = [(prompt[-1] + k) % 10 for k in range(1, 5)]
        assert table[world.output_index(counting)] == 4.0
    assert world.true_reward([3, 5, 1, 7], [8, 9, 1, 1]) == -1.0 and world.true_reward([3, 5, 1, 7], [8]) == -1.0


def test_the_annotator_is_bradley_terry_in_the_true_reward():
    rng = random.Random(0)
    prompt, better, worse = [3, 5, 1, 7], [8, 9, 0, 1], [4, 5, 6, 7]  # true rewards 4 and 0
    wins = sum(world.annotator_tiers(prompt, [better, worse], 2.0, rng)[0] == [0] for _ in range(4000)) / 4000
    assert wins == pytest.approx(1 / (1 + np.exp(-4 / 2.0)), abs=0.03)
    assert world.annotator_tiers(prompt, [worse, better, [2, 4, 6, 8]], 0.0, rng) == [[1], [0], [2]]


@pytest.mark.slow
def test_exact_log_probabilities_are_the_models_own(toy_base):
    import torch
    from transformers import AutoModelForCausalLM

    from preflab.training.demos import toy_world as toy

    model = AutoModelForCausalLM.from_pretrained(toy_base)
    prompts = world.sample_prompts(3, seed=5)
    logp = world.log_probs(model, prompts, chunk=2)
    assert logp.shape == (3, 10_000) and np.allclose(np.exp(logp).sum(axis=1), 1.0)
    rng = random.Random(1)
    for i, prompt in enumerate(prompts):
        output = [rng.randrange(10) for _ in range(4)]
        ids = torch.tensor([toy.encode(prompt, output)])
        with torch.no_grad():
            digits = model(input_ids=ids).logits[0, 4:8, toy.DIGIT0 : toy.DIGIT0 + 10].double().log_softmax(-1)
        direct = sum(digits[k, d].item() for k, d in enumerate(output))
        assert logp[i, world.output_index(output)] == pytest.approx(direct, abs=1e-6)


def synthetic_world(prompts: int = 3, seed: int = 0):
    """A reference over the 10⁴ outputs, the true rewards of real prompts, and a noisy proxy."""
    rng = np.random.default_rng(seed)
    ref = rng.dirichlet(np.full(10_000, 0.05), size=prompts)
    ref = np.maximum(ref, 1e-300)
    ref /= ref.sum(axis=1, keepdims=True)
    true = world.true_rewards_table(world.sample_prompts(prompts, seed=seed))
    proxy = true + rng.normal(0, 1.0, size=true.shape)
    return np.log(ref), true, Scores(proxy)


def test_best_of_n_points_are_exact_and_start_at_the_reference():
    from preflab.training.bestofn.kl import kl_bound, kl_exact

    ref_logp, true, proxy = synthetic_world()
    points = bon_points(ref_logp, true, proxy, [1, 4, 64])
    reference = policy_point("reference", "", ref_logp, ref_logp, true, proxy)
    assert points[0].kl == pytest.approx(0, abs=1e-9) and points[0].win_rate == pytest.approx(0.5, abs=1e-6)
    assert points[0].true == pytest.approx(reference.true, abs=1e-6) and reference.kl == 0
    assert points[0].proxy == pytest.approx(reference.proxy, abs=1e-6)
    for point, n in zip(points[1:], (4, 64)):
        ref = np.exp(ref_logp)
        kept = np.where(ref >= 1e-7, ref, 0)
        exact = np.mean([kl_exact(k / k.sum(), np.where(k > 0, s, 0), [n])[0] for k, s in zip(kept, proxy.values)])
        assert point.kl == pytest.approx(exact) and point.kl <= kl_bound(n) + 1e-9
    assert points[0].proxy < points[1].proxy < points[2].proxy  # best-of-n climbs the proxy


def test_a_policy_point_scores_the_whole_distribution():
    ref_logp, true, proxy = synthetic_world(prompts=2)
    best = np.full_like(ref_logp, -np.inf)
    top = true.argmax(axis=1)
    best[np.arange(2), top] = 0.0  # all mass on a best output
    point = policy_point("oracle", "", best, ref_logp, true, proxy)
    ref = np.exp(ref_logp)
    assert point.true == pytest.approx(true.max(axis=1).mean())
    assert point.kl == pytest.approx(np.mean(-ref_logp[np.arange(2), top]))
    expected = np.mean(
        [ref[i][true[i] < true[i, top[i]]].sum() + 0.5 * ref[i][true[i] == true[i, top[i]]].sum() for i in range(2)]
    )
    assert point.win_rate == pytest.approx(expected)


def test_findings_say_where_the_true_reward_turns_down():
    points = [
        Point("rl", "beta=1", 0.2, 0.5, 0.6, 0.6),
        Point("rl", "beta=0.1", 1.0, 0.9, 0.9, 0.7),
        Point("rl", "beta=0", 3.0, 1.4, 0.1, 0.4),
        Point("dpo", "beta=0.1", 0.2, 0.4, 0.7, 0.65),
    ]
    found = findings(points, baseline=0.3)
    rl = found["methods"]["rl"]
    assert rl["overoptimised"] and rl["peak_setting"] == "beta=0.1"
    assert rl["after_peak"]["true_drop"] == pytest.approx(0.8) and rl["after_peak"]["proxy_rise"] == pytest.approx(0.5)
    assert found["most_true_reward_per_nat"] == "dpo" and found["highest_true_reward"] == "rl"
    assert not found["methods"]["dpo"]["overoptimised"]
    text = describe(found)
    assert any(line.startswith("rl: true reward peaks at beta=0.1") for line in text)


def test_the_chart_is_written(tmp_path):
    from preflab.training.bestofn.fit import fit_gao
    from preflab.training.goodhart.chart import frontier_chart

    points = [
        Point("best-of-n", f"n={n}", kl, 0.3 + kl / 4, 0.3 + 0.2 * kl - 0.05 * kl * kl, 0.5 + kl / 20)
        for n, kl in ((1, 0.0), (4, 0.64), (16, 1.83), (64, 3.17))
    ]
    points.append(Point("rl", "beta=0.1", 0.8, 0.6, 0.4, 0.55, kl_stderr=0.05))
    fits = {"best-of-n": fit_gao([p.kl for p in points[1:4]], [p.true for p in points[1:4]], baseline=0.3), "rl": None}
    out = frontier_chart(points, fits, 0.3, tmp_path / "chart.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


QUICK = [
    "--prompts",
    60,
    "--more-prompts",
    120,
    "--eval-prompts",
    8,
    "--base-steps",
    120,
    "--ns",
    "1,4,16,64",
    "--dpo-betas",
    "0.1",
    "--simpo-betas",
    "2",
    "--rl-betas",
    "0,1",
    "--rl-steps",
    16,
]


@pytest.mark.slow
def test_demo_goodhart_puts_every_method_on_one_chart(sqlite_url, tmp_path):
    result = CliRunner().invoke(
        cli,
        [
            "--database-url",
            sqlite_url,
            "demo",
            "goodhart",
            "--workdir",
            str(tmp_path / "g"),
            *map(str, QUICK),
            "--json",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    methods = {p["method"] for p in report["points"]}
    assert methods == {"best-of-n", "dpo", "simpo", "rl"}
    bon = [p for p in report["points"] if p["method"] == "best-of-n"]
    assert [p["setting"] for p in bon] == ["n=1", "n=4", "n=16", "n=64"] and bon[0]["kl"] == pytest.approx(0, abs=1e-9)
    # n = 1 is the reference (drawn from the outputs holding all but ~1e-4 of its mass).
    assert bon[0]["true"] == pytest.approx(report["reference"]["true"], abs=1e-3)
    assert all(b["kl"] > a["kl"] for a, b in itertools.pairwise(bon))  # KL grows with n
    rl = {p["setting"]: p for p in report["points"] if p["method"] == "rl"}
    assert rl["beta=0"]["kl"] > rl["beta=1"]["kl"]  # the KL penalty holds the policy back
    assert rl["beta=0"]["proxy"] > report["reference"]["proxy"]  # RL climbed the proxy
    assert all(0 <= p["win_rate"] <= 1 and p["coverage"] > 0.99 for p in report["points"])
    assert set(report["findings"]["methods"]) == methods and report["fits"]["best-of-n"] is not None
    assert [row["prompts"] for row in report["comparisons_sweep"]] == [60, 120]
    with open(report["chart"], "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
    from preflab.db.engine import open_database, session_factory

    with session_factory(open_database(sqlite_url)).begin() as session:
        kinds = session.scalars(select(TrainingRun.kind).order_by(TrainingRun.id)).all()
        assert kinds == ["reward-grouped", "dpo", "simpo", "rl", "rl", "reward-grouped"]
        # Every policy is a recorded model version, and the table names it.
        names = set(session.scalars(select(ModelVersion.name).where(ModelVersion.kind == "policy")))
        assert names == {p["model_version"] for p in report["points"] if p["method"] != "best-of-n"}


def write_lineage_rankings(base, policy, path, prompts) -> int:
    """Samples of the base and the policy per prompt, ranked by the toy's annotator (human, the truth) and
    scored by a noisy proxy (an AI annotator), written as JSON Lines that name each sample's model."""
    from transformers import AutoModelForCausalLM

    from preflab.training.demos import toy_world as toy

    rng = random.Random(0)
    samples = {}
    for label, location in (("base", base), ("policy", policy)):
        outputs = toy.sample_outputs(AutoModelForCausalLM.from_pretrained(location), prompts, 6, seed=1)
        samples[label] = [list(dict.fromkeys(tuple(o) for o in group if len(o) == 4)) for group in outputs]
    lines = []
    for i, prompt in enumerate(prompts):
        texts, models = {}, []
        for label, location in (("base", base), ("policy", policy)):
            for output in samples[label][i]:
                if output not in texts:
                    texts[output] = len(texts)
                    models.append(str(location))
        outputs = list(texts)
        if len(outputs) < 2:
            continue
        common = {
            "prompt": toy.prompt_text(prompt),
            "responses": [toy.completion_text(o) for o in outputs],
            "model": models,
        }
        lines.append(
            {
                **common,
                "ranking": toy.annotator_tiers(prompt, outputs),
                "annotator": "toy-human",
                "annotator_kind": "human",
                "id": f"human-{i}",
            }
        )
        scores = [float(o[0] == toy.preferred_first(prompt)) + rng.gauss(0, 0.3) for o in outputs]
        order = sorted(range(len(outputs)), key=lambda j: -scores[j])
        lines.append(
            {
                **common,
                "ranking": [[j] for j in order],
                "scores": scores,
                "annotator": "proxy-rm",
                "annotator_kind": "ai",
                "id": f"proxy-{i}",
            }
        )
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return len(lines)


@pytest.mark.slow
def test_bon_frontier_charts_a_lineage_of_real_model_versions(toy_store, toy_base, tmp_path):
    from preflab.db.ingest.jsonl import import_file, import_rankings_batch
    from preflab.training.config import DPOTrainConfig
    from preflab.training.methods import train

    url, sessions = toy_store
    policy = train(
        "dpo",
        sessions,
        DPOTrainConfig(
            loss_type="sigmoid,sft",
            max_steps=24,
            per_device_train_batch_size=8,
            learning_rate=2e-3,
            max_length=16,
            use_cpu=True,
            logging_steps=8,
            save_steps=10_000,
        ),
        str(toy_base),
    )
    path = tmp_path / "lineage.jsonl"
    assert write_lineage_rankings(toy_base, policy.path, path, world.sample_prompts(30, seed=3)) > 40
    import_file(sessions, path, import_rankings_batch)
    result = CliRunner().invoke(
        cli,
        [
            "--database-url",
            url,
            "bon",
            "frontier",
            "--policy",
            policy.model_version,
            "--proxy",
            "proxy-rm",
            "--true",
            "human",
            "--plain",
            "--out",
            str(tmp_path / "frontier.png"),
            "--json",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["lineage"][-1] == policy.model_version and len(report["lineage"]) == 2
    root, trained = [p for p in report["points"] if p["method"] == "lineage"]
    assert root["kl"] == 0 and trained["setting"] == policy.model_version
    assert trained["kl"] > 0 and trained["kl_stderr"] > 0  # a Monte-Carlo estimate, with its error
    # DPO learned the annotator's preference: its samples win on the truth, and the proxy agrees.
    assert trained["true"] > root["true"] and trained["win_rate"] > 0.5 and trained["proxy"] > root["proxy"]
    assert next(p["setting"] for p in report["points"] if p["method"] == "best-of-n") == "n=1"
    assert (tmp_path / "frontier.png").read_bytes()[:4] == b"\x89PNG"
    text = (
        CliRunner()
        .invoke(
            cli,
            [
                "--database-url",
                url,
                "bon",
                "frontier",
                "--policy",
                policy.model_version,
                "--proxy",
                "proxy-rm",
                "--plain",
                "--out",
                str(tmp_path / "f2.png"),
            ],
        )
        .output
    )
    assert "lineage" in text and "chart:" in text
