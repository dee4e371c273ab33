"""`preflab generate` on conversations: the model reads every message of the history, and answers by it."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from preflab.db.models import Candidate, Prompt
from tests.lm.conversations import (
    FRANCE,
    ITALY,
    LAST,
    recorded_inputs,
    shown_history,
    tutor_lm,  # noqa: F401 (fixture)
)

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out


def conversations_file(path):
    path.write_text("".join(json.dumps({"prompt": turns}) + "\n" for turns in (FRANCE, ITALY)), encoding="utf-8")
    return path


def stored_answers(sessions) -> dict[str, list[str]]:
    """Each conversation's candidates, by the country its system prompt names."""
    with sessions.begin() as session:
        rows = session.execute(
            select(Prompt.messages, Candidate.text)
            .join(Candidate, Candidate.prompt_id == Prompt.id)
            .order_by(Candidate.id)
        ).all()
    out: dict[str, list[str]] = {}
    for messages, text in rows:
        out.setdefault(messages[0]["content"].split()[-1].rstrip("."), []).append(text)
    return out


def test_generate_answers_each_conversation_by_its_history(cli, sessions, tutor_lm, tmp_path):
    # The two prompts end with the same user message: only their history tells the answers apart.
    out = json.loads(
        cli(
            "--model",
            tutor_lm,
            "generate",
            "--prompts",
            conversations_file(tmp_path / "c.jsonl"),
            "-n",
            1,
            "--max-new-tokens",
            6,
            "--json",
        ).stdout
    )
    assert out["prompts"] == 2 and out["stored"] == 2
    assert stored_answers(sessions) == {"France": ["Paris."], "Italy": ["Rome."]}
    with sessions.begin() as session:
        assert sorted(session.scalars(select(Prompt.text))) == [LAST, LAST]


def test_generate_feeds_the_model_the_system_prompt_and_earlier_turns(cli, sessions, tutor_lm, tmp_path):
    from preflab.labelling.generation import GenerateConfig, generate_candidates
    from preflab.lm.loading import load_causal_lm

    cli("import", "prompts", conversations_file(tmp_path / "c.jsonl"))
    model, tokenizer = load_causal_lm(tutor_lm, device="cpu")
    with recorded_inputs(model, tokenizer) as seen:
        summary = generate_candidates(sessions, model, tokenizer, "tutor", GenerateConfig(n=2, max_new_tokens=4))
    assert summary.prompts == 2
    read = [text for text in seen if LAST in text]
    for turns in (FRANCE, ITALY):
        assert any(all(content in text for content in shown_history(turns)) for text in read)
    assert all(text.startswith("<|im_start|>system\nYou are a tutor on") for text in read)
    assert all(text.endswith(f"<|im_start|>user\n{LAST}<|im_end|>\n<|im_start|>assistant\n") for text in read)
