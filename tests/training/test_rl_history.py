"""`train rl` on conversations: the prompts keep their history, and the policy samples after all of it."""

from __future__ import annotations

import json

import pytest

from tests.lm.conversations import (
    FRANCE,
    ITALY,
    tutor_lm,  # noqa: F401 (fixture)
)
from tests.tiny_models import tiny_tokenizer


def test_a_chat_model_gets_every_prompt_of_a_file_as_messages_a_conversation_whole(tmp_path):
    from datasets import Dataset

    from preflab.lm.loading import chat_prompt
    from preflab.training.rl import RLTrainConfig, prompt_length, training_prompts

    path = tmp_path / "prompts.jsonl"
    path.write_text(
        "".join(json.dumps({"prompt": p}) + "\n" for p in ("Name a colour.", FRANCE, "Name a colour.")),
        encoding="utf-8",
    )
    tokenizer = tiny_tokenizer()
    config = RLTrainConfig(reward_model="rm", prompts_file=str(path), max_length=None)
    prompts = training_prompts(None, config, tokenizer)
    # One type for the column, and each prompt through the chat template: the conversation with its history.
    assert prompts == [[{"role": "user", "content": "Name a colour."}], FRANCE]
    assert Dataset.from_dict({"prompt": prompts})["prompt"] == prompts
    assert prompt_length(tokenizer, FRANCE) == len(tokenizer(chat_prompt(tokenizer, FRANCE))["input_ids"])
    # --max-length counts the whole history: the conversation no longer fits where the short prompt does.
    room = prompt_length(tokenizer, FRANCE) - 1
    short = training_prompts(
        None, RLTrainConfig(reward_model="rm", prompts_file=str(path), max_new_tokens=1, max_length=room + 1), tokenizer
    )
    assert short == [[{"role": "user", "content": "Name a colour."}]]


def test_a_base_model_without_a_chat_template_gets_plain_prompts_and_stops_at_a_conversation(tmp_path):
    from preflab.errors import InputError
    from preflab.training.rl import RLTrainConfig, training_prompts

    base = tiny_tokenizer()
    base.chat_template = None  # a base model: it trained on plain text
    plain, mixed = tmp_path / "plain.jsonl", tmp_path / "mixed.jsonl"
    plain.write_text(json.dumps({"prompt": "1 2 3 ="}) + "\n", encoding="utf-8")
    mixed.write_text(json.dumps({"prompt": "1 2 3 ="}) + "\n" + json.dumps({"prompt": ITALY}) + "\n", encoding="utf-8")
    assert training_prompts(None, RLTrainConfig(reward_model="rm", prompts_file=str(plain)), base) == ["1 2 3 ="]
    with pytest.raises(InputError, match="the model has no chat template, so it cannot read the conversations"):
        training_prompts(None, RLTrainConfig(reward_model="rm", prompts_file=str(mixed)), base)


@pytest.mark.slow
def test_held_out_samples_follow_each_conversation(tutor_lm):
    from preflab.lm.loading import load_causal_lm
    from preflab.lm.sampling import SamplingConfig
    from preflab.training.rl_heldout import heldout_samples

    model, tokenizer = load_causal_lm(tutor_lm, device="cpu")
    rows, completions = heldout_samples(model, tokenizer, [FRANCE, ITALY], SamplingConfig(n=2, max_new_tokens=6), 0)
    assert rows == [FRANCE, FRANCE, ITALY, ITALY]
    assert [c[0]["content"] for c in completions] == ["Paris.", "Paris.", "Rome.", "Rome."]
