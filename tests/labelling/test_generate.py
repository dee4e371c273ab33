"""`preflab generate`: N candidates per prompt, batched, topped up on re-runs, never duplicated."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select

from preflab.db.models import Candidate, ModelVersion, Prompt, RawRecord
from tests.tiny_models import fit_completions, tiny_causal_lm, tiny_tokenizer

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

PROMPTS = ["What is the capital of France?", "Write a short poem about the sea.", "How many legs does a spider have?"]


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    return tiny_causal_lm(tmp_path_factory.mktemp("models") / "tiny-lm")


@pytest.fixture(scope="module")
def parrot_lm(tmp_path_factory):
    """A tiny model that answers every prompt with the same words."""
    path = tiny_causal_lm(tmp_path_factory.mktemp("models") / "parrot")
    from transformers import AutoTokenizer

    from preflab.lm.loading import chat_text

    tokenizer = AutoTokenizer.from_pretrained(path)
    return fit_completions(path, [(chat_text(tokenizer, p), "Paris.") for p in PROMPTS], steps=60, lr=1e-2)


def write_prompts(path, prompts=PROMPTS):
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts), encoding="utf-8")
    return path


def test_generate_stores_n_candidates_per_prompt_and_tops_up(cli, sessions, tiny_lm, tmp_path):
    prompts = write_prompts(tmp_path / "prompts.jsonl")
    first = json.loads(
        cli("--model", tiny_lm, "generate", "--prompts", prompts, "-n", 2, "--max-new-tokens", 6, "--json").stdout
    )
    assert first["stored"] == 6 and first["prompts"] == 3 and first["short"] == 0
    with sessions.begin() as session:
        rows = session.scalars(select(Candidate)).all()
        assert len(rows) == 6
        assert {r.model for r in rows} == {str(tiny_lm.resolve())}
        version = session.get(ModelVersion, rows[0].model_version_id)
        assert version.kind == "base" and version.path == str(tiny_lm.resolve())
        for r in rows:
            assert r.text.strip()
            assert r.sampling["temperature"] == 0.7 and r.sampling["top_p"] == 0.9
            assert r.sampling["max_new_tokens"] == 6 and isinstance(r.sampling["seed"], int)
        per_prompt = dict(
            session.execute(select(Candidate.prompt_id, func.count()).group_by(Candidate.prompt_id)).all()
        )
        assert sorted(per_prompt.values()) == [2, 2, 2]

    again = json.loads(cli("--model", tiny_lm, "generate", "--prompts", prompts, "-n", 2, "--json").stdout)
    assert again["stored"] == 0 and again["prompts"] == 0

    more = json.loads(
        cli("--model", tiny_lm, "generate", "--prompts", prompts, "-n", 3, "--max-new-tokens", 6, "--json").stdout
    )
    assert more["stored"] == 3
    with sessions.begin() as session:
        assert session.scalar(select(func.count()).select_from(Candidate)) == 9
        assert session.scalar(select(func.count()).select_from(Prompt)) == 3


def test_identical_samples_are_stored_once(cli, sessions, parrot_lm, tmp_path):
    prompts = write_prompts(tmp_path / "prompts.jsonl", PROMPTS[:1])
    result = json.loads(
        cli("--model", parrot_lm, "generate", "--prompts", prompts, "-n", 3, "--max-new-tokens", 4, "--json").stdout
    )
    with sessions.begin() as session:
        texts = session.scalars(select(Candidate.text)).all()
    assert "Paris." in texts
    assert len(texts) == len(set(texts)) == result["stored"] < 3
    assert result["duplicates"] > 0 and result["short"] == 1


def test_batched_generation_equals_one_prompt_at_a_time(tiny_lm):
    """Left padding must not change what a prompt generates (greedy, so comparable)."""
    from preflab.lm.loading import chat_text, load_causal_lm
    from preflab.lm.sampling import generate_texts

    model, tokenizer = load_causal_lm(tiny_lm)
    texts = [chat_text(tokenizer, p) for p in ["Hi", *PROMPTS]]
    batched = generate_texts(model, tokenizer, texts, max_new_tokens=8, do_sample=False)
    single = [generate_texts(model, tokenizer, [t], max_new_tokens=8, do_sample=False)[0] for t in texts]
    assert [b.text for b in batched] == [s.text for s in single]
    assert all(b.tokens == s.tokens for b, s in zip(batched, single))


def test_bad_prompts_file_is_one_clear_error_and_kept_raw(cli, sessions, tiny_lm, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('not json\n{"text": "no prompt key"}\n', encoding="utf-8")
    result = cli("--model", tiny_lm, "generate", "--prompts", bad, expect_ok=False)
    assert result.exit_code == 1
    assert "holds no usable prompt" in result.output and "Traceback" not in result.output
    with sessions.begin() as session:
        assert session.scalar(select(func.count()).select_from(RawRecord).where(RawRecord.status == "quarantined")) == 2
    result = cli("--model", tiny_lm, "generate", "-n", 0, expect_ok=False)
    assert result.exit_code == 1 and "n must be at least 1" in result.output


def test_missing_model_is_one_clear_error(cli, tmp_path):
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    write_prompts(tmp_path / "p.jsonl")
    result = cli("--model", empty, "generate", "--prompts", tmp_path / "p.jsonl", expect_ok=False)
    assert result.exit_code == 1 and "is not a model folder" in result.output


def test_tiny_tokenizer_round_trips_any_text():
    tokenizer = tiny_tokenizer()
    text = "Ünïcödé ✓ and code: x = 1"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
