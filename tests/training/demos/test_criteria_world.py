"""The criteria world: helpfulness and harmlessness by planted rules that conflict, through preflab's own pipeline.

One store holds each pool's ranking by each criterion (`import rankings` with `criterion`), and the same rankings
again as criterion `overall` from two annotators: the mixture a store without criteria held. Trained once for the
module, from one base model of the digit language, each by the CLI:

- a multi-objective reward model, `train reward --criteria harmlessness,helpfulness`;
- a single reward model on the mixture of both criteria's pairs, `train reward --criterion overall`, with the same
  steps, rate and batches;
- a policy, `train dpo` on `export --combine lexicographic:harmlessness,helpfulness`.

Everything is measured against the planted rules (`preflab.training.demos.criteria_world`). The runs are on SQLite:
what a run by criterion stores is tested on both databases in tests/training/test_train_criteria.py.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from preflab.cli import cli
from preflab.db.models import DatasetVersion, ModelVersion, TrainingRun
from preflab.training.demos import criteria_world as world
from preflab.training.demos import toy_world as toy

pytestmark = pytest.mark.slow

PROMPTS = 300
SPLIT = ["--test-size", 0.2, "--seed", 0]
COMMON = ["--max-length", 16, "--use-cpu", "--seed", 0, "--logging-steps", 20, "--save-steps", 10_000]
# The same for both reward models: 400 steps of 32 pairs (≈ 3 passes over either's pairs). Centring the rewards
# (each pair's summed rewards pulled to 0) makes a head's score absolute: its criterion's two good replies score
# alike, which a lexicographic rule over the heads needs. Without it the harmlessness head ranked the safe replies
# by helpfulness, backwards (in the pools the helpful replies are mostly unsafe), and a safe-first pick found the
# safe and helpful reply in 61% of fresh pools; with 0.05, 95%; with 0.3, 99%.
REWARD = [
    *("--max-steps", 400, "--learning-rate", 2e-3, "--per-device-train-batch-size", 32, "--warmup-steps", 0.1),
    *("--center-rewards-coefficient", 0.1),
]
# Plain DPO (no SFT term): the chosen side of most pairs is a safe reply that does not help, which an NLL term
# would teach too.
DPO = [
    *("--loss", "sigmoid", "--beta", 0.1, "--learning-rate", 1e-3, "--num-train-epochs", 2),
    *("--per-device-train-batch-size", 32, "--precompute-ref-batch-size", 256, "--warmup-steps", 0.1),
]


def run(url: str, *args) -> dict:
    result = CliRunner().invoke(cli, ["--database-url", url, *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The store, its base model, the three runs' results and the combined export's name."""
    import torch

    from preflab.db.engine import open_database, session_factory

    folder = tmp_path_factory.mktemp("criteria-world")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread beats two contended ones
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PREFLAB_HOME", str(folder / "home"))
        env.setenv("HF_DATASETS_CACHE", str(folder / "hf-datasets"))
        try:
            url = f"sqlite:///{folder / 'preflab.db'}"
            base = toy.train_base_model(folder / "base", steps=300, seed=0).resolve()
            world.rankings_file(folder / "rankings.jsonl", PROMPTS, seed=0, mixed=True)
            run(url, "import", "rankings", folder / "rankings.jsonl", "--json")
            run(url, "pairs", "build", "--json")
            for criterion in (*world.CRITERIA, "overall"):  # the split each run reads: a fifth of the prompts held out
                run(url, "export", folder / criterion, "--criterion", criterion, *SPLIT, "--json")
            combined = run(url, "export", folder / "combined", "--combine", world.SAFETY_FIRST, *SPLIT, "--json")
            multi = run(
                url,
                "train",
                "reward",
                "--model",
                base,
                "--criteria",
                ",".join(world.CRITERIA),
                *REWARD,
                *COMMON,
                "--json",
            )
            mixed = run(url, "train", "reward", "--model", base, "--criterion", "overall", *REWARD, *COMMON, "--json")
            dpo = run(
                url,
                "train",
                "dpo",
                "--model",
                base,
                "--dataset-version",
                combined["name"],
                "--output-dir",
                folder / "dpo",
                *DPO,
                *COMMON,
                "--json",
            )
        finally:
            torch.set_num_threads(threads)
    yield {
        "url": url,
        "sessions": session_factory(open_database(url)),
        "base": base,
        "multi": multi,
        "mixed": mixed,
        "dpo": dpo,
        "combined": combined,
    }


def fresh_pools(trained, n: int = 120, seed: int = 1) -> list[tuple[list[int], list[list[int]]]]:
    """Pools of prompts the store does not hold, drawn as the campaign drew its own."""
    from preflab.db.models import Prompt

    with trained["sessions"].begin() as session:
        known = {tuple(toy.parse_digits(text)) for text in session.scalars(select(Prompt.text))}
    rng = random.Random(seed)
    out: list[tuple[list[int], list[list[int]]]] = []
    while len(out) < n:
        prompt = toy.sample_prompt(rng)
        if tuple(prompt) not in known:
            known.add(tuple(prompt))
            out.append((prompt, world.pool(rng, prompt)))
    return out


def rule_accuracy(scores, pools, criterion: str) -> float:
    """How often a scorer (prompt, replies -> one score each) puts the reply `criterion`'s rule likes above one it
    does not, over every such pair of the pools."""
    right = total = 0
    for prompt, replies in pools:
        values = scores(prompt, replies)
        good, bad = world.criterion_tiers(criterion, prompt, replies)
        right += sum(values[g] > values[b] for g in good for b in bad)
        total += len(good) * len(bad)
    return right / total


def heads_scorer(path: str):
    from preflab.training.objectives import head_scores, load_reward_heads

    model, tokenizer, criteria = load_reward_heads(path)

    def vectors(prompt, replies):
        texts = [toy.completion_text(r) for r in replies]
        return head_scores(model, tokenizer, [toy.prompt_text(prompt)] * len(texts), texts)

    return vectors, criteria


def test_each_head_of_the_multi_objective_model_recovers_its_rule(trained):
    multi = trained["multi"]
    assert multi["kind"] == "reward-multi" and multi["metrics"]["criteria"] == list(world.CRITERIA)
    metrics = multi["metrics"]
    # It learned: the loss fell from ln 2 to near 0 on pairs of both criteria.
    assert metrics["first_loss"] > 0.6 and metrics["last_loss"] < 0.1, metrics
    for criterion in world.CRITERIA:  # held-out pairs of the store, each scored by its own criterion's head
        head = metrics["heads"][criterion]
        assert head["heldout_accuracy"] >= 0.95 and head["heldout_pairs"] >= 400, (criterion, head)
    # And on pools of prompts it never saw, against the planted rules themselves.
    vectors, criteria = heads_scorer(multi["path"])
    pools = fresh_pools(trained)
    for k, criterion in enumerate(criteria):
        accuracy = rule_accuracy(lambda p, r, k=k: [v[k] for v in vectors(p, r)], pools, criterion)
        assert accuracy >= 0.95, (criterion, accuracy)


def test_one_reward_model_on_the_mixture_recovers_neither_rule_as_well(trained):
    from datasets import load_from_disk

    from preflab.lm.loading import load_sequence_scorer
    from preflab.lm.scoring import pairwise_accuracy

    multi, mixed = trained["multi"], trained["mixed"]
    assert mixed["metrics"]["criterion"] == "overall"
    # The same held-out pairs of each criterion: the multi-objective run's test split names each pair's criterion.
    test = load_from_disk(str(Path(multi["path"]).parent / "data"))["test"]
    model, tokenizer = load_sequence_scorer(mixed["path"])
    numbers = {}
    for criterion in world.CRITERIA:
        pairs = test.filter(lambda row, c=criterion: row["criterion"] == c)
        numbers[criterion] = {
            "multi-objective head": multi["metrics"]["heads"][criterion]["heldout_accuracy"],
            "one model on the mixture": pairwise_accuracy(model, tokenizer, pairs)["accuracy"],
        }
    shown = "; ".join(f"{c}: " + ", ".join(f"{k} {v:.3f}" for k, v in n.items()) for c, n in numbers.items())
    for n in numbers.values():
        # Four of a criterion's nine pairs in a pool are the other criterion's pairs reversed: the mixture holds
        # both orders of each, and a single score can follow only one.
        assert n["one model on the mixture"] <= 0.9 < 0.95 <= n["multi-objective head"], shown
        assert n["multi-objective head"] - n["one model on the mixture"] >= 0.1, shown
    print(f"held-out accuracy by criterion: {shown}")


def test_the_heads_combined_safety_first_pick_safe_replies_then_helpful_ones(trained):
    """Best-of-n's pick with `lexicographic:harmlessness,helpfulness` over the heads, and `train eval` on the
    combined export: the export's rule, applied to the model's scores."""
    from preflab.db.export.heads import combine_group, heads_rule

    vectors, criteria = heads_scorer(trained["multi"]["path"])
    rule = heads_rule(world.SAFETY_FIRST, criteria)
    pools = fresh_pools(trained)
    picked = []
    for prompt, replies in pools:
        combined = combine_group(rule, criteria, vectors(prompt, replies))
        best = replies[max(range(len(replies)), key=combined.__getitem__)]
        picked.append((not world.unsafe(best), world.helps(prompt, best)))
    safe = sum(s for s, _ in picked) / len(picked)
    both = sum(p == (True, True) for p in picked) / len(picked)
    print(f"safety-first pick over the heads: safe {safe:.3f}, safe and helpful {both:.3f}")
    # Every pool holds one reply that is safe and helps: safety first, always; helpfulness among the safe replies
    # as often as the heads' scores allow. Measured: safe 1.000 everywhere; safe and helpful 0.95 or more on some
    # draws of this machine kind and 0.925 on an AMD EPYC one (deterministic there: its trained heads differ in the
    # last digits, and a few pools' safe replies fall outside the harmlessness head's tie margin).
    assert safe >= 0.98 and both >= 0.9, picked
    # The bench on the combined export's held-out pairs scores each pair by the same rule over the heads.
    report = run(
        trained["url"],
        "train",
        "eval",
        trained["multi"]["model_version"],
        "--dataset-version",
        trained["combined"]["name"],
        "--json",
    )
    assert report["dataset_version"] == trained["combined"]["name"]
    assert report["heldout_accuracy"] >= 0.95 and report["heldout_pairs"] >= 500, report


def test_dpo_on_safety_first_pairs_moves_the_policy_to_safe_replies_then_helpful_ones(trained):
    from datasets import load_from_disk
    from transformers import AutoModelForCausalLM

    dpo = trained["dpo"]
    assert dpo["dataset_version"] == trained["combined"]["name"]
    metrics = dpo["metrics"]
    assert metrics["last_loss"] < metrics["first_loss"] - 0.2, metrics  # the DPO loss fell
    # Held out: the policy raised the preferred reply of a pair over the other (β·log π/π_ref; chance is ½).
    assert metrics["heldout_reward_accuracy"] >= 0.75, metrics
    test = load_from_disk(str(Path(dpo["path"]).parent / "data"))["test"]
    prompts = [toy.parse_digits(text) for text in dict.fromkeys(test["prompt"])]
    before = world.policy_rates(AutoModelForCausalLM.from_pretrained(trained["base"]), prompts)
    after = world.policy_rates(AutoModelForCausalLM.from_pretrained(dpo["path"]), prompts)
    shown = f"before {before}, after {after}"
    print(
        f"DPO: {shown}; loss {metrics['first_loss']:.3f} → {metrics['last_loss']:.3f}, held-out implicit-reward "
        f"accuracy {metrics['heldout_reward_accuracy']:.3f}"
    )
    # Before: the base language writes the marker a quarter to a third of the time, and helps a quarter of it.
    assert 0.55 <= before["safe"] <= 0.8 and 0.15 <= before["helpful_given_safe"] <= 0.35, shown
    # After: safe replies first…
    assert after["safe"] >= 0.95 and after["safe"] > before["safe"] + 0.15, shown
    # …and among the safe, the helpful ones: the best kind, safe and helpful, is now the likeliest reply.
    assert after["helpful_given_safe"] >= 0.7 and after["safe_and_helpful"] >= 0.65, shown
    assert after["safe_and_helpful"] > 3 * before["safe_and_helpful"], shown


def test_the_runs_and_versions_record_their_criteria(trained):
    from transformers import AutoConfig

    with trained["sessions"].begin() as session:
        runs = {r.id: r for r in session.scalars(select(TrainingRun))}
        multi = runs[trained["multi"]["run_id"]]
        assert multi.kind == "reward-multi" and multi.config["criteria"] == ",".join(world.CRITERIA)
        data = session.get(DatasetVersion, multi.dataset_version_id)
        assert data.name.startswith("criteria-") and set(data.settings["criteria"]) == set(world.CRITERIA)
        mixed = runs[trained["mixed"]["run_id"]]
        assert mixed.config["criterion"] == "overall"
        assert session.get(DatasetVersion, mixed.dataset_version_id).settings["criterion"] == "overall"
        version = session.scalar(select(ModelVersion).where(ModelVersion.name == trained["multi"]["model_version"]))
        assert version.kind == "reward" and version.metrics["criteria"] == list(world.CRITERIA)
    # The saved model names its heads: it loads back with plain transformers.
    config = AutoConfig.from_pretrained(trained["multi"]["path"])
    assert config.num_labels == 2 and [config.id2label[k] for k in range(2)] == list(world.CRITERIA)
    assert AutoConfig.from_pretrained(trained["mixed"]["path"]).id2label == {0: "overall"}
