"""`preflab generate --engine openai` against the real vLLM server (tests/vllm_server.py), serving SmolLM2.

A multi-turn conversation goes to the server as its messages, and vLLM applies the model's chat
template to the whole history: the prompt tokens it counts are those of the same template
applied here, system prompt and earlier turns included.
"""

from __future__ import annotations

import json

from sqlalchemy import select

from preflab.db.models import Candidate, Prompt
from preflab.db.requests import EngineRequest

HISTORY = [
    {"role": "system", "content": "You are a tutor on France. Be brief."},
    {"role": "user", "content": "Tell me about the country."},
    {"role": "assistant", "content": "It lies in western Europe."},
    {"role": "user", "content": "What is its capital?"},
]


def test_generate_on_vllm_stores_candidates_for_a_conversation(cli, sessions, vllm_server, monkeypatch, tmp_path):
    from preflab.lm.loading import chat_prompt, load_tokenizer

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    path = tmp_path / "prompts.jsonl"
    path.write_text(
        json.dumps({"prompt": HISTORY}) + "\n" + json.dumps({"prompt": "Name a colour."}) + "\n", encoding="utf-8"
    )
    out = json.loads(
        cli(
            "generate",
            "--engine",
            "openai",
            "--api-base",
            vllm_server.url,
            "--model",
            vllm_server.model,
            "--prompts",
            path,
            "-n",
            2,
            "--max-new-tokens",
            24,
            "--json",
        ).stdout
    )
    served = f"openai:{vllm_server.model}"
    assert (out["stored"] + out["duplicates"], out["prompts"], out["model"]) == (4, 2, served)
    assert out["engine"]["requests"] == 4 and out["engine"]["errors"] == 0 and out["engine"]["tokens_out"] > 0
    with sessions.begin() as session:
        rows = session.execute(
            select(Prompt.messages, Candidate.text, Candidate.model, Candidate.sampling).join(
                Candidate, Candidate.prompt_id == Prompt.id
            )
        ).all()
        asked = session.execute(select(EngineRequest.request, EngineRequest.tokens_in)).all()
    assert len(rows) == out["stored"] and all(text.strip() and model == served for _, text, model, _ in rows)
    assert any(messages == HISTORY for messages, *_ in rows)
    assert all(sampling["tokens"] <= 24 for *_, sampling in rows)
    tokenizer = load_tokenizer(vllm_server.model_dir)
    expected = len(tokenizer(chat_prompt(tokenizer, HISTORY), add_special_tokens=False)["input_ids"])
    history = [tokens for request, tokens in asked if request["messages"] == HISTORY]
    assert history == [expected, expected]
