"""`preflab export`: Hugging Face datasets split by prompt, pseudonyms, dataset versions, the Hub."""

import json

import pytest
from sqlalchemy import select

from preflab.db.export import load_export, split_prompts
from preflab.db.models import DatasetVersion, Prompt

from .helpers import ranking_line, write_lines


@pytest.fixture
def populated(cli, tmp_path):
    lines = []
    for i in range(20):
        responses = [f"answer {i}.{j}" for j in range(4)]
        lines.append(ranking_line(f"prompt {i}", responses, [[0], [1], [2, 3]], "alice@example.com", id=f"a{i}"))
        if i % 2:
            lines.append(ranking_line(f"prompt {i}", responses, [[1], [0], [3]], "Bob Smith", id=f"b{i}"))
    cli("import", "rankings", write_lines(tmp_path / "r.jsonl", lines))
    cli("pairs", "build")
    return cli


@pytest.mark.parametrize("fmt", ["disk", "parquet", "jsonl"])
def test_export_formats_and_columns(populated, sessions, tmp_path, fmt):
    out = tmp_path / f"out-{fmt}"
    info = json.loads(populated("export", out, "--format", fmt, "--test-size", "0.25", "--json").stdout)
    dd = load_export(out)
    assert set(dd) == {"train", "test"}
    assert dd["train"].column_names == ["prompt", "chosen", "rejected", "margin", "prompt_id", "weight",
                                        "annotator_kind", "annotator"]
    assert len(dd["train"]) == info["train"] and len(dd["test"]) == info["test"]
    assert info["train"] + info["test"] == 20 * 5 + 10 * 3
    train_prompts, test_prompts = set(dd["train"]["prompt_id"]), set(dd["test"]["prompt_id"])
    assert not train_prompts & test_prompts
    assert len(test_prompts) == 5
    annotators = set(dd["train"]["annotator"]) | set(dd["test"]["annotator"])
    assert len(annotators) == 2 and all(a.startswith("human-") for a in annotators)
    for split in dd.values():
        assert "alice@example.com" not in str(split.to_list()) and "Bob Smith" not in str(split.to_list())
    card = (out / "README.md").read_text()
    assert "| test |" in card and info["content_hash"] in card
    with sessions.begin() as s:
        version = s.scalar(select(DatasetVersion))
        assert (version.n_train, version.n_test, version.n_prompts) == (info["train"], info["test"], 20)
        assert version.settings["strategy"] == "all" and version.format == fmt
        splits = dict(s.execute(select(Prompt.id, Prompt.split)).all())
        assert {splits[p] for p in test_prompts} == {"test"}


def test_split_is_seeded_and_by_prompt():
    hashes = {i: f"{i:064x}" for i in range(100)}
    a, b, c = split_prompts(hashes, 0.2, 0), split_prompts(hashes, 0.2, 0), split_prompts(hashes, 0.2, 1)
    assert a == b and a != c
    assert sum(v == "test" for v in a.values()) == 20
    assert "test" in split_prompts({1: "x" * 64, 2: "y" * 64}, 0.01, 0).values()


def test_same_content_same_hash(populated, tmp_path):
    first = json.loads(populated("export", tmp_path / "a", "--format", "jsonl", "--json").stdout)
    second = json.loads(populated("export", tmp_path / "b", "--format", "parquet", "--json").stdout)
    assert first["content_hash"] == second["content_hash"] and first["name"] != second["name"]
    populated("pairs", "build", "--strategy", "adjacent")
    third = json.loads(populated("export", tmp_path / "c", "--format", "jsonl", "--json").stdout)
    assert third["content_hash"] != first["content_hash"]


def test_conversational_export(populated, tmp_path):
    populated("export", tmp_path / "conv", "--conversational", "--format", "parquet")
    row = load_export(tmp_path / "conv")["train"][0]
    assert row["prompt"][0]["role"] == "user" and row["chosen"][0]["role"] == "assistant"
    assert row["chosen"][0]["content"].startswith("answer")


def test_nothing_to_export_is_one_sentence(cli, tmp_path):
    result = cli("export", tmp_path / "x", expect_ok=False)
    assert result.exit_code == 1
    assert result.output.strip() == ("Error: there are no comparisons to export; "
                                     "run `preflab pairs build` first")


def test_hub_push_without_token_is_a_clear_error(populated, tmp_path):
    result = populated("export", tmp_path / "h", "--hub", "someone/prefs", expect_ok=False)
    assert result.exit_code == 1
    assert "HF_TOKEN is not set" in result.output and "Traceback" not in result.output


def test_unreachable_hub_is_a_clear_error_and_the_token_is_never_shown(populated, tmp_path, monkeypatch):
    # The real push_to_hub code path runs up to the network: the Hub is out of reach here,
    # so point it at a closed loopback port.
    token = "hf_thisIsASecretTokenValue"
    monkeypatch.setenv("HF_TOKEN", token)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    result = populated("export", tmp_path / "h", "--hub", "someone/prefs", expect_ok=False)
    assert result.exit_code == 1
    assert "could not push to the Hugging Face Hub repo someone/prefs" in result.output
    assert token not in result.output and "Traceback" not in result.output
    assert (tmp_path / "h" / "dataset_dict.json").exists()  # the local export is kept
