"""`preflab demo toy --world history`: the instruction is in an earlier turn, and only the whole conversation tells.

The system turn says which digit to start with; the user's last turn is four digits that
allow four first digits. The base model ignores the instruction (it follows it a quarter
of the time); DPO on the conversational export must learn to read it.
"""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from preflab.cli import cli
from tests.toy_data import one_thread  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow


def test_the_chat_template_renders_the_tokens_the_world_trains_on():
    from preflab.training.demos import history_world as world

    tokenizer = world.digit_role_tokenizer()
    messages = world.conversation(7, [4, 5, 9, 1])
    assert (
        tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        == "<system> 7 </s> <user> 4 5 9 1 </s> <assistant>"
    )
    reply = [{"role": "assistant", "content": "8 5 6 0"}]
    ids = tokenizer.apply_chat_template(messages + reply, tokenize=True, return_dict=True)["input_ids"]
    assert list(ids) == world.encode(7, [4, 5, 9, 1], [8, 5, 6, 0])
    assert world.parse(messages) == (7, [4, 5, 9, 1])


def test_dpo_on_the_conversational_export_learns_to_follow_an_earlier_instruction(sqlite_url, tmp_path):
    import torch
    from datasets import load_from_disk
    from transformers import AutoModelForCausalLM

    from preflab.training.demos import history_world as world
    from preflab.training.demos import toy_world as toy

    result = CliRunner().invoke(
        cli,
        [
            "--database-url",
            sqlite_url,
            "demo",
            "toy",
            "--world",
            "history",
            "--prompts",
            "400",
            "--base-steps",
            "200",
            "--workdir",
            str(tmp_path / "history"),
            "--json",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["world"] == "history" and report["held_out_conversations"] >= 50
    # Before: the base rule allows four first digits and ignores the instruction, so chance is 1/4.
    assert 0.2 <= report["follow_rate_before"] <= 0.3 and report["sampled_follow_rate_before"] <= 0.35
    # After DPO on the conversations: the earlier turn's instruction is followed.
    assert report["follow_rate_after"] >= 0.9 and report["sampled_follow_rate_after"] >= 0.9
    assert report["dpo_heldout_reward_accuracy"] >= 0.9
    # The later digits still follow the base rule about as often as the base model's do.
    assert report["base_rule_rate_after"] >= report["base_rule_rate_before"] - 0.1

    # It trained on the conversational export: the instruction is a system turn of every prompt.
    assert report["dataset"]["conversational"] is True
    rows = load_from_disk(str(Path(report["workdir"]) / "dpo" / "data"))["train"]
    assert all(p[0]["role"] == "system" and p[-1]["role"] == "user" for p in rows["prompt"][:50])

    # The same last user turn gets a different first digit for each instruction: the history decides.
    policy = AutoModelForCausalLM.from_pretrained(Path(report["workdir"]) / "dpo" / "model")
    conversations = [
        (instruction, digits)
        for digits in ([0, 3, 6, 8], [9, 1, 4, 2], [5, 7, 2, 3])
        for instruction in sorted(toy.allowed(digits))
    ]
    with torch.no_grad():
        probs = policy(input_ids=torch.tensor([world.encode(i, d) for i, d in conversations])).logits[:, -1].softmax(-1)
    followed = [probs[n, toy.DIGIT0 + i].item() for n, (i, _) in enumerate(conversations)]
    assert min(followed) > 0.5 and sum(followed) / len(followed) >= 0.9
