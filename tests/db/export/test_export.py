"""`preflab export`: Hugging Face datasets split by prompt, pseudonyms, dataset versions, the Hub."""

import json

import pytest
from datasets import load_from_disk
from sqlalchemy import select

from preflab.db.export.dataset import ExportSettings, load_export, split_prompts, write_dataset
from preflab.db.models import Annotator, Candidate, DatasetVersion, Prompt
from tests.db.helpers import ranking_line, write_lines


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
    assert dd["train"].column_names == [
        "prompt",
        "chosen",
        "rejected",
        "margin",
        "prompt_id",
        "weight",
        "annotator_kind",
        "annotator",
    ]
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
    cli("db", "upgrade")  # an empty store (export never creates one)
    result = cli("export", tmp_path / "x", expect_ok=False)
    assert result.exit_code == 1
    assert result.output.strip() == ("Error: there are no comparisons to export; run `preflab pairs build` first")


def test_an_export_whose_splits_the_database_did_not_store_is_not_recorded(populated, sessions, tmp_path, monkeypatch):
    from preflab.db.export import job as export

    stored = export.for_values
    monkeypatch.setattr(
        export, "for_values", lambda session, statement, values: stored(session, statement, list(values)[1:])
    )
    result = populated("export", tmp_path / "short", expect_ok=False)
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: the database stored the split of 18 of the export's 20 prompts; the export was not recorded"
    )
    with sessions() as s:
        assert s.scalars(select(DatasetVersion)).all() == []
        assert s.scalars(select(Prompt.split).where(Prompt.split.is_not(None))).all() == []


def test_an_export_whose_pairs_changed_while_it_read_them_is_not_recorded(populated, sessions, tmp_path, monkeypatch):
    """The pairs are read on a second connection (a child process on SQLite, ADBC on Postgres), which sees a
    pairs build that commits after the export counted them: the counts would no longer match the data."""
    from sqlalchemy import delete, func

    from preflab.db.export import arrow
    from preflab.db.export import job as export
    from preflab.db.models import Comparison

    counted = export.pair_mix

    def then_a_commit(session, kind):
        mix = counted(session, kind)
        with sessions.begin() as other:  # another writer, in its own transaction
            other.execute(delete(Comparison).where(Comparison.prompt_id == other.scalar(select(func.min(Prompt.id)))))
        return mix

    monkeypatch.setattr(export, "pair_mix", then_a_commit)
    monkeypatch.setattr(arrow, "CHILD_MIN_ROWS", 1)
    result = populated("export", tmp_path / "moved", expect_ok=False)
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: the export read 125 pairs where the database counted 130 (a pairs "
        "build committed meanwhile?); the export was not recorded: run it again"
    )
    with sessions() as s:
        assert s.scalars(select(DatasetVersion)).all() == []


def test_hub_push_without_token_is_a_clear_error(populated, tmp_path):
    result = populated("export", tmp_path / "h", "--hub", "someone/prefs", expect_ok=False)
    assert result.exit_code == 1
    assert "HF_TOKEN is not set" in result.output and "Traceback" not in result.output


def test_unreachable_hub_is_a_clear_error_and_the_token_is_never_shown(populated, tmp_path, monkeypatch):
    # The real push_to_hub code path runs up to the network: the Hub is out of reach here,
    # so point it at a closed loopback port.
    # huggingface_hub and datasets read HF_HUB_OFFLINE and HF_ENDPOINT once, when first imported: the
    # test sets their constants (monkeypatch restores them), so the rest of the session stays offline.
    import datasets
    from huggingface_hub import constants

    token = "hf_thisIsASecretTokenValue"
    monkeypatch.setenv("HF_TOKEN", token)
    for module, name, value in (
        (constants, "HF_HUB_OFFLINE", False),
        (datasets.config, "HF_HUB_OFFLINE", False),
        (constants, "ENDPOINT", "http://127.0.0.1:9"),
        (datasets.config, "HF_ENDPOINT", "http://127.0.0.1:9"),
    ):
        monkeypatch.setattr(module, name, value)
    result = populated("export", tmp_path / "h", "--hub", "someone/prefs", expect_ok=False)
    assert result.exit_code == 1
    assert "could not push to the Hugging Face Hub repo someone/prefs" in result.output
    assert token not in result.output and "Traceback" not in result.output
    assert (tmp_path / "h" / "dataset_dict.json").exists()  # the local export is kept


def test_write_dataset_of_hand_made_pairs(cli, sessions, tmp_path):
    """The self-rewarding loop's path: its own pairs, its own splits, one writer."""
    lines = [
        ranking_line(f"prompt {i}", [f"answer {i}.{j}" for j in range(3)], [[0], [1], [2]], "carol", id=f"c{i}")
        for i in range(3)
    ]
    cli("import", "rankings", write_lines(tmp_path / "r.jsonl", lines))
    with sessions.begin() as s:
        prompt = {text: pid for pid, text in s.execute(select(Prompt.id, Prompt.text))}
        answer = {text: cid for cid, text in s.execute(select(Candidate.id, Candidate.text))}
        carol = s.scalar(select(Annotator).where(Annotator.name == "carol"))
        pseudonym, carol_id = carol.pseudonym, carol.id
    pairs = [
        (prompt["prompt 0"], answer["answer 0.0"], answer["answer 0.2"], 2.0, 1.0, "ai", carol_id),
        (prompt["prompt 1"], answer["answer 1.0"], answer["answer 1.1"], 1.0, 1.0, "ai", carol_id),
        (prompt["prompt 1"], answer["answer 1.1"], answer["answer 1.2"], 0.5, 0.5, "human", None),
        (prompt["prompt 2"], answer["answer 2.2"], answer["answer 2.0"], 3.0, 1.0, "ai", carol_id),
    ]
    splits = {prompt["prompt 0"]: "train", prompt["prompt 1"]: "train", prompt["prompt 2"]: "test"}
    out = tmp_path / "iteration-1"
    with sessions.begin() as s:
        version = write_dataset(
            s,
            [pairs[:3], pairs[3:]],
            splits,
            out,
            ExportSettings(format="disk", conversational=True),
            prefix="selfreward-1",
            iteration=1,
            version_settings={"strategy": "best-vs-worst"},
        )
        assert version.name == f"selfreward-1-{version.content_hash[:8]}"
        assert (version.n_train, version.n_test, version.n_prompts) == (3, 1, 3)

    dd = load_from_disk(str(out))
    assert {split: len(rows) for split, rows in dd.items()} == {"train": 3, "test": 1}
    assert dd["train"][0] == {
        "prompt": [{"role": "user", "content": "prompt 0"}],
        "chosen": [{"role": "assistant", "content": "answer 0.0"}],
        "rejected": [{"role": "assistant", "content": "answer 0.2"}],
        "margin": 2.0,
        "prompt_id": prompt["prompt 0"],
        "weight": 1.0,
        "annotator_kind": "ai",
        "annotator": pseudonym,
    }
    assert dd["train"][2]["annotator"] == "aggregate" and dd["train"][2]["weight"] == 0.5
    assert dd["test"][0]["chosen"][0]["content"] == "answer 2.2"
    manifest = json.loads((out / "preflab.json").read_text())
    assert manifest["iteration"] == 1 and manifest["settings"]["strategy"] == "best-vs-worst"
    with sessions.begin() as s:
        stored = s.scalar(select(DatasetVersion))
        assert stored.iteration == 1 and stored.settings["conversational"] is True
