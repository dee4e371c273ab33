"""The model leaf reads a prompt's whole history: the chat template over every message, for sampling and scoring."""

from __future__ import annotations

import pytest

from tests.lm.conversations import FRANCE, ITALY, LAST, recorded_inputs, shown_history
from tests.tiny_models import tiny_causal_lm, tiny_reward_model, tiny_tokenizer


@pytest.fixture(scope="module")
def reward_model(tmp_path_factory):
    from preflab.lm.loading import load_sequence_scorer

    return load_sequence_scorer(tiny_reward_model(tmp_path_factory.mktemp("models") / "rm"), device="cpu")


def test_chat_prompt_renders_every_message_and_ends_where_the_model_answers():
    from preflab.lm.loading import chat_prompt, chat_text

    tokenizer = tiny_tokenizer()
    text = chat_prompt(tokenizer, FRANCE)
    assert text == (
        "<|im_start|>system\nYou are a tutor on France.<|im_end|>\n"
        "<|im_start|>user\nTell me about the country.<|im_end|>\n"
        "<|im_start|>assistant\nIt lies in western Europe.<|im_end|>\n"
        f"<|im_start|>user\n{LAST}<|im_end|>\n<|im_start|>assistant\n"
    )
    # A user's one message is the one-turn conversation it always was.
    assert chat_prompt(tokenizer, LAST) == chat_text(tokenizer, LAST) == chat_prompt(tokenizer, FRANCE[-1:])


def test_a_plain_model_reads_a_conversation_through_the_fallback_template(tmp_path):
    from preflab.lm.loading import PLAIN_CHAT_TEMPLATE, chat_prompt, load_tokenizer

    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = None  # a base model's tokenizer
    plain = load_tokenizer(tiny_causal_lm(tmp_path / "plain", tokenizer=tokenizer))
    assert plain.chat_template == PLAIN_CHAT_TEMPLATE
    assert chat_prompt(plain, FRANCE) == (
        "System: You are a tutor on France.\n\nUser: Tell me about the country.\n\n"
        "Assistant: It lies in western Europe.\n\nUser: What is its capital?\n\n"
        "Assistant:"
    )


def test_exchange_keeps_the_plain_case_plain_and_a_conversation_whole():
    from preflab.lm.scoring import exchange

    one = [{"role": "user", "content": "Hi"}]
    reply = [{"role": "assistant", "content": "Hello."}]
    assert exchange(one, reply) == ("Hi", "Hello.")
    assert exchange(one, reply, conversational=True) == (one, reply)
    assert exchange(FRANCE, reply) == (FRANCE, reply)
    turns = [*reply, {"role": "user", "content": "More?"}, {"role": "assistant", "content": "No."}]
    assert exchange(one, turns) == (one, turns)


def test_a_reward_model_scores_the_same_reply_differently_under_another_history(reward_model):
    from preflab.lm.scoring import exchange, reward_scores

    model, tokenizer = reward_model
    reply = [{"role": "assistant", "content": "Paris."}]
    inputs = [exchange(turns, reply) for turns in (FRANCE, ITALY, FRANCE[-1:])]
    with recorded_inputs(model, tokenizer) as seen:
        france, italy, alone = reward_scores(model, tokenizer, [p for p, _ in inputs], [r for _, r in inputs])
    assert france != italy and france != alone
    read = next(text for text in seen if "France" in text)
    assert all(content in read for content in shown_history(FRANCE)) and read.rstrip().endswith("Paris.<|im_end|>")


def test_a_pair_ranker_reads_the_history_and_a_reply_of_several_turns_as_the_template_writes_them():
    from preflab.lm.pair_ranker import pair_ids

    tokenizer = tiny_tokenizer()
    longer = [
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "Are you sure?"},
        {"role": "assistant", "content": "Yes, Paris."},
    ]
    ids, a_end = pair_ids(tokenizer, FRANCE, longer, [{"role": "assistant", "content": "Rome."}])
    text = tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\nYou are a tutor on France.<|im_end|>")
    assert text.endswith(
        "<|im_start|>assistant\nParis.<|im_end|>\n<|im_start|>user\nAre you sure?<|im_end|>\n"
        "<|im_start|>assistant\nYes, Paris.<|im_end|>Rome.<|im_end|>"
    )
    assert tokenizer.decode(ids[: a_end + 1]).endswith("Yes, Paris.<|im_end|>")
    # One message is read as its content, as before.
    single, _ = pair_ids(tokenizer, "Hi", "Hello.", "Bye.")
    assert tokenizer.decode(single) == "HiHello.<|im_end|>Bye.<|im_end|>"


def test_a_reward_model_reads_a_plain_exchange_as_it_trained_on_it(reward_model, tmp_path):
    """A model with a chat template of its own trains on messages (`training.data.for_model`), one without on text."""
    from preflab.lm.loading import load_sequence_scorer
    from preflab.lm.scoring import reward_scores

    model, tokenizer = reward_model
    turns = [{"role": "user", "content": "Hi"}], [{"role": "assistant", "content": "Hello."}]
    as_chat = reward_scores(model, tokenizer, [turns[0]], [turns[1]])
    assert reward_scores(model, tokenizer, ["Hi"], ["Hello."]) == as_chat
    base_tokenizer = tiny_tokenizer()
    base_tokenizer.chat_template = None
    base, plain = load_sequence_scorer(tiny_reward_model(tmp_path / "base-rm", tokenizer=base_tokenizer), device="cpu")
    with recorded_inputs(base, plain) as seen:
        reward_scores(base, plain, ["Hi", turns[0]], ["Hello.", turns[1]])
    assert sorted(seen) == ["HiHello.<|im_end|>", "User: Hi\n\nAssistant: Hello.\n\n"]
