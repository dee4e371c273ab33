"""`train eval` on held-out conversations: both models answer after the whole history, and the judge reads it."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import update

from preflab.db.models import ModelVersion, Prompt
from tests.lm.conversations import (
    FRANCE,
    ITALY,
    recorded_inputs,
    shown_history,
    tutor_lm,  # noqa: F401 (fixture)
)
from tests.tiny_models import fit_completions, tiny_causal_lm

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lms(tmp_path_factory, tutor_lm):
    """The policy answers each conversation by its history; its parent says "London." to both."""
    from transformers import AutoTokenizer

    from preflab.lm.loading import chat_prompt

    root = tmp_path_factory.mktemp("eval-history")
    base = tiny_causal_lm(root / "base", seed=3)
    tokenizer = AutoTokenizer.from_pretrained(base)
    fit_completions(base, [(chat_prompt(tokenizer, turns), "London.") for turns in (FRANCE, ITALY)], steps=60, lr=1e-2)
    return tutor_lm, base


def test_policy_eval_answers_and_judges_each_conversation_by_its_history(cli, sessions, lms, tmp_path):
    from preflab.labelling.judges.likelihood import LikelihoodConfig
    from preflab.labelling.judges.table import JUDGES
    from preflab.lm.loading import load_causal_lm
    from preflab.training.evaluate import answer, plan_policy_eval, win_rate

    tutor, base = lms
    held_out = tmp_path / "held-out.jsonl"
    held_out.write_text("".join(json.dumps({"prompt": turns}) + "\n" for turns in (FRANCE, ITALY)), encoding="utf-8")
    cli("import", "prompts", held_out)
    with sessions.begin() as session:
        session.execute(update(Prompt).values(split="test"))
        parent = ModelVersion(name="base", kind="base", path=str(base))
        session.add(parent)
        session.flush()
        session.add(ModelVersion(name="tutor", kind="policy", path=str(tutor), parent_id=parent.id))
    with sessions.begin() as session:
        plan = plan_policy_eval(session, session.query(ModelVersion).filter_by(name="tutor").one())
    assert [prompt for _, prompt, _ in plan.prompts] == [FRANCE, ITALY] and not plan.conversational

    model, tokenizer = load_causal_lm(tutor, device="cpu")
    # A policy trained on plain text still reads a conversation through its chat template: every message.
    assert answer(model, tokenizer, [FRANCE, ITALY], False, 6, False, 0, 2) == ["Paris.", "Rome."]
    with recorded_inputs(model, tokenizer) as seen:
        report = win_rate(plan, JUDGES["likelihood"].make(model, tokenizer, LikelihoodConfig()), max_new_tokens=6)
    for turns in (FRANCE, ITALY):
        assert any(
            text.startswith("<|im_start|>system\n" + turns[0]["content"])
            and all(content in text for content in shown_history(turns))
            for text in seen
        )
    # The judge (the policy's own model here) prefers each history's answer to the parent's "London.".
    assert report["prompts"] == 2 and report["wins"] == 2 and report["win_rate"] == 1.0
