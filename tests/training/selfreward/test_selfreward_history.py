"""The self-rewarding loop on conversations: its prompt pool keeps them whole, and M_t answers them by their history."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from preflab.console import SILENT
from preflab.db.models import Candidate, Prompt
from tests.lm.conversations import (
    FRANCE,
    ITALY,
    LAST,
    tutor_lm,  # noqa: F401 (fixture)
)

pytestmark = pytest.mark.slow


def test_pool_conversations_are_stored_whole_and_answered_by_their_history(cli, sessions, tutor_lm, tmp_path):
    from preflab.lm.names import ModelCache
    from preflab.training.selfreward.config import SelfRewardConfig
    from preflab.training.selfreward.loop import _next_iteration
    from preflab.training.selfreward.state import load_context
    from preflab.training.selfreward.steps import STEP_FUNCTIONS

    pool = tmp_path / "pool.jsonl"
    pool.write_text(
        "".join(json.dumps({"prompt": p}) + "\n" for p in (FRANCE, ITALY, "Name a colour.")), encoding="utf-8"
    )
    config = SelfRewardConfig(
        model=str(tutor_lm),
        prompt_pool=str(pool),
        prompts_per_iteration=3,
        n=2,
        max_new_tokens=6,
        judge="likelihood",
        eval_limit=0,
    )
    row_id = _next_iteration(sessions, config, {}, 1, "history", str(tmp_path / "loop"))
    models = ModelCache()
    for step in ("prompts", "candidates"):
        ctx = load_context(sessions, row_id)
        assert ctx.step == step
        STEP_FUNCTIONS[step](sessions, ctx, models, SILENT)
    models.clear()

    with sessions.begin() as session:
        prompts = {p.id: p for p in session.scalars(select(Prompt).where(Prompt.iteration == 1))}
        stored = sorted(((p.text, p.messages) for p in prompts.values()), key=json.dumps)
        assert stored == sorted([("Name a colour.", None), (LAST, FRANCE), (LAST, ITALY)], key=json.dumps)
        answers: dict[str | None, set[str]] = {}
        for c in session.scalars(select(Candidate).where(Candidate.iteration == 1)):
            messages = prompts[c.prompt_id].messages
            answers.setdefault(messages[0]["content"] if messages else None, set()).add(c.text)
    # The two conversations end with the same message: M_0 answers each by its history.
    assert answers[FRANCE[0]["content"]] == {"Paris."} and answers[ITALY[0]["content"]] == {"Rome."}
    # Imported again, the pool's conversations are the prompts the loop stored: one identity either way.
    assert "(0 new prompts, 0 new candidates)" in cli("import", "prompts", pool).stdout
