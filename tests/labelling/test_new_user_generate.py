"""`preflab generate` reaches a few prompts without a separate file: --limit, --prompt-id, --split."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select, update

from preflab.db.models import Candidate, Prompt
from tests.labelling.ls_helpers import session
from tests.tiny_models import tiny_causal_lm

PROMPTS = [f"Question number {i}: what is {i} plus {i}?" for i in range(1, 6)]


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    return tiny_causal_lm(tmp_path_factory.mktemp("models") / "tiny-lm")


def prompts_with_candidates(url: str) -> list[int]:
    with session(url) as s:
        return sorted(set(s.scalars(select(Candidate.prompt_id))))


def test_generate_selects_prompts_by_count_id_and_split(lcli, sqlite_url, tiny_lm, tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS), encoding="utf-8")
    lcli("import", "prompts", path)
    generate = ("--model", tiny_lm, "generate", "-n", 2, "--max-new-tokens", 4)

    text = lcli(*generate, "--limit", 2).output.strip()
    assert text.startswith("generated ") and " for 2 prompts with " in text
    assert text.endswith("; 3 more prompts left by --limit)")
    assert prompts_with_candidates(sqlite_url) == [1, 2]
    # A re-run goes on with the next prompts that still need candidates.
    report = json.loads(lcli(*generate, "--limit", 2, "--json").stdout)
    assert (report["prompts"], report["waiting"]) == (2, 1)
    assert prompts_with_candidates(sqlite_url) == [1, 2, 3, 4]

    assert json.loads(lcli(*generate, "--prompt-id", "5", "--json").stdout)["prompts"] == 1
    assert prompts_with_candidates(sqlite_url) == [1, 2, 3, 4, 5]

    missing = lcli(*generate, "--prompt-id", "2,99", expect_ok=False)
    assert missing.exit_code == 1
    assert missing.output.strip() == "Error: no stored prompt has id 99 (see `preflab stats`)"
    unsplit = lcli(*generate, "--split", "test", expect_ok=False)
    assert unsplit.output.strip() == (
        "Error: no stored prompt is in the test split; a prompt gets its split "
        "when a dataset is exported (`preflab export`)"
    )

    # An export assigns each prompt its split (set here directly, as `preflab export` would).
    with session(sqlite_url) as s, s.begin():
        s.execute(update(Prompt).values(split="train"))
        s.execute(update(Prompt).where(Prompt.id == 4).values(split="test"))
    report = json.loads(lcli(*generate[:3], "-n", 3, "--max-new-tokens", 4, "--split", "test", "--json").stdout)
    assert report["prompts"] == 1
    with session(sqlite_url) as s:
        counts = {
            pid: len(s.scalars(select(Candidate.id).where(Candidate.prompt_id == pid)).all()) for pid in range(1, 6)
        }
    assert counts[4] == 3 and all(counts[p] == 2 for p in (1, 2, 3, 5))
