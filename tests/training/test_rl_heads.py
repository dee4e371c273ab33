"""RL's reward from a multi-objective reward model: one head (`--reward-head`), or a rule over the heads within each
prompt's group of completions (`--reward-combine`), as TRL hands them in; and the held-out reward by a rule, both
policies' samples of a prompt ordered together."""

from __future__ import annotations

import pytest

from preflab.db.export.heads import combine_group, heads_rule
from preflab.errors import ConfigError
from tests.tiny_models import tiny_reward_model, two_head_reward_model

PROMPTS = ["Name a prime.", "Say hi."]
COMPLETIONS = ["7", "9", "It is 11.", "hello", "hi there", "Go away."]


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    return two_head_reward_model(tmp_path_factory.mktemp("rl-heads") / "heads")


def vectors(path):
    from preflab.lm.loading import load_sequence_scorer
    from preflab.lm.scoring import reward_vectors

    model, tokenizer = load_sequence_scorer(path, heads=True)
    return reward_vectors(model, tokenizer, [PROMPTS[i // 3] for i in range(6)], COMPLETIONS)


def test_a_head_or_a_rule_within_each_prompts_group(heads):
    from preflab.training.rl import RewardModelReward

    # TRL's batches hold a prompt's completions together; interleaved here, the groups must still not mix
    order = [0, 3, 1, 4, 2, 5]
    prompts = [PROMPTS[i // 3] for i in order]
    completions = [COMPLETIONS[i] for i in order]
    expected = vectors(heads)

    by_head = RewardModelReward(str(heads), "cpu", 4, head="helpfulness")
    assert by_head(prompts, completions) == pytest.approx([expected[i][1] for i in order], abs=1e-4)

    rule = "lexicographic:harmlessness,helpfulness"
    by_rule = RewardModelReward(str(heads), "cpu", 4, combine=rule)
    got = dict(zip(order, by_rule(prompts, completions)))
    names = ["harmlessness", "helpfulness"]
    for group in ([0, 1, 2], [3, 4, 5]):
        assert [got[i] for i in group] == combine_group(heads_rule(rule, names), names, [expected[i] for i in group])
    assert len(set(got.values())) > 1  # the rule tells some completions apart

    with pytest.raises(ConfigError, match=r"has 2 heads \(harmlessness, helpfulness\): read one with --reward-head"):
        RewardModelReward(str(heads), "cpu")


def test_a_one_head_model_takes_no_head(tmp_path):
    from preflab.training.rl import RewardModelReward

    with pytest.raises(ConfigError, match="has one head: it takes no --reward-head NAME or --reward-combine RULE"):
        RewardModelReward(str(tiny_reward_model(tmp_path / "one")), "cpu", head="helpfulness")


def test_held_out_by_a_rule_orders_both_policies_samples_of_a_prompt_together():
    from preflab.training.rl_heldout import _together

    seen = []

    def read(group):  # a rule's order of one group: here, by the first value, best 1.0
        seen.append(group)
        ranked = sorted(range(len(group)), key=lambda i: group[i][0])
        return [ranked.index(i) / (len(group) - 1) for i in range(len(group))]

    start = [[1.0], [2.0], [10.0], [20.0]]
    policy = [[3.0], [4.0], [5.0], [30.0]]
    out = _together(read, {"start": start, "policy": policy}, 2)
    assert seen == [start[:2] + policy[:2], start[2:] + policy[2:]]  # a prompt's samples of both, together
    assert out == {"start": [0.0, 1 / 3, 1 / 3, 2 / 3], "policy": [2 / 3, 1.0, 0.0, 1.0]}
