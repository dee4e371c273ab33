"""`bon sample` on conversations: the policy samples after the whole history, the reward model scores given it."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from preflab.db.models import Candidate, ModelVersion, Prompt
from tests.lm.conversations import (
    FRANCE,
    ITALY,
    LAST,
    recorded_inputs,
    shown_history,
    tutor_lm,  # noqa: F401 (fixture)
)
from tests.tiny_models import tiny_reward_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def models(tmp_path_factory, tutor_lm):
    return tutor_lm, tiny_reward_model(tmp_path_factory.mktemp("bon-history") / "rm")


def test_bon_sample_reads_every_message_of_a_conversation(cli, sessions, models, tmp_path):
    from preflab.lm.engines import open_engine
    from preflab.lm.loading import load_causal_lm, load_sequence_scorer
    from preflab.lm.names import NamedModel
    from preflab.training.bestofn.config import BonSampleConfig
    from preflab.training.bestofn.sample import best_of_n

    policy_path, rm_path = models
    prompts = tmp_path / "conversations.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": turns}) + "\n" for turns in (FRANCE, ITALY)), encoding="utf-8")
    cli("import", "prompts", prompts)
    with sessions.begin() as session:
        session.add(ModelVersion(name="rm-tiny", kind="reward", path=str(rm_path)))
    policy = NamedModel("tutor", str(policy_path), None, *load_causal_lm(policy_path, device="cpu"))
    reward = NamedModel("rm-tiny", str(rm_path), None, *load_sequence_scorer(rm_path, device="cpu"))
    config = BonSampleConfig(n=3, temperature=1.0, top_p=1.0, max_new_tokens=6)
    with (
        recorded_inputs(policy.model, policy.tokenizer) as sampled,
        recorded_inputs(reward.model, reward.tokenizer) as scored,
    ):
        summary = best_of_n(sessions, open_engine(model=policy, batch_size=config.batch_size), reward, config)
    assert summary.prompts == 2 and summary.samples == 6
    for turns in (FRANCE, ITALY):
        for seen in (sampled, scored):
            assert any(
                text.startswith("<|im_start|>system\n" + turns[0]["content"])
                and all(content in text for content in shown_history(turns))
                for text in seen
            )
    # The reward model scores each draw as the reply to the conversation (the chat template over all of it).
    assert any(
        text.startswith("<|im_start|>system\nYou are a tutor on France.")
        and text.endswith(f"{LAST}<|im_end|>\n<|im_start|>assistant\nParis.<|im_end|>\n")
        for text in scored
    )
    # Only the history tells the two prompts apart, and the policy answers each by it.
    with sessions.begin() as session:
        drawn = {messages[0]["content"]: set() for messages in session.scalars(select(Prompt.messages))}
        for messages, text in session.execute(
            select(Prompt.messages, Candidate.text).join(Candidate, Candidate.prompt_id == Prompt.id)
        ):
            drawn[messages[0]["content"]].add(text)
    assert drawn == {FRANCE[0]["content"]: {"Paris."}, ITALY[0]["content"]: {"Rome."}}
