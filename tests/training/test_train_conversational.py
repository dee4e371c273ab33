"""Training never glues a prompt to its reply: conversational exports, and what TRL tokenizes from them.

A tiny Llama with a ChatML template (tests/tiny_models.py) trains on a store of
conversations (a system prompt and earlier turns before the question). What TRL
tokenizes is read back from the trainer's own dataloader and decoded: every
prompt, chosen and rejected text is the model's chat template applied to the
export's messages, so training sees what `generate` and the judges show the model.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from transformers import TrainerCallback

from preflab.cli import cli
from tests.db.helpers import write_lines
from tests.toy_data import one_thread  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

SYSTEM = "Answer briefly."


def run(url, *args, expect_ok=True):
    result = CliRunner().invoke(cli, ["--database-url", url, *map(str, args)], catch_exceptions=False)
    if expect_ok:
        assert result.exit_code == 0, result.output
    return result


def conversation(i: int, history: bool):
    question = f"What is {i} plus {i}?"
    if not history:
        return question
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": question},
    ]


def store_of(url, tmp_path, history: bool, prompts: int = 16) -> None:
    """Rankings of three replies per prompt (the right sum first), imported and paired."""
    lines = [
        json.dumps(
            {
                "prompt": conversation(i, history and i % 4 != 0),
                "responses": [f"It is {2 * i}.", f"Maybe {i + 1}.", "No idea."],
                "ranking": [[0], [1], [2]],
                "annotator": "alice",
                "id": f"r{i}",
            }
        )
        for i in range(prompts)
    ]
    run(url, "import", "rankings", write_lines(tmp_path / "rankings.jsonl", lines))
    run(url, "pairs", "build")


@pytest.fixture(scope="module")
def chat_lm(tmp_path_factory) -> Path:
    from tests.tiny_models import tiny_causal_lm

    return tiny_causal_lm(tmp_path_factory.mktemp("chat") / "lm")


class Tokenized(TrainerCallback):
    """The token ids the trainer's dataloader holds: what TRL tokenized from the dataset."""

    def __init__(self):
        self.rows = None

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        self.rows = train_dataloader.dataset.to_list()


def rendered(tokenizer, messages, generation=False) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)


def run_data(result):
    from datasets import load_from_disk

    return load_from_disk(str(Path(result.path).parent / "data"))["train"].to_list()


def test_dpo_trains_on_a_conversational_export_through_the_chat_template(sqlite_url, tmp_path, chat_lm):
    from transformers import AutoTokenizer

    from preflab.db.engine import open_database, session_factory
    from preflab.db.export.dataset import load_export
    from preflab.training.config import DPOTrainConfig
    from preflab.training.methods import train

    store_of(sqlite_url, tmp_path, history=True)
    info = json.loads(run(sqlite_url, "export", tmp_path / "export", "--json").stdout)  # the default form
    assert info["conversational"] is True and info["prompt"] == "explicit"
    seen = Tokenized()
    config = DPOTrainConfig(
        max_steps=2, per_device_train_batch_size=4, learning_rate=1e-3, max_length=256, use_cpu=True, logging_steps=1
    )
    result = train(
        "dpo", session_factory(open_database(sqlite_url)), config, str(chat_lm), info["name"], callbacks=[seen]
    )
    assert result.metrics["global_step"] == 2 and result.metrics["heldout_pairs"] > 0

    tokenizer = AutoTokenizer.from_pretrained(chat_lm)
    assert all(isinstance(r["prompt"], list) for r in run_data(result))  # the run trains on the messages
    rows = load_export(tmp_path / "export")["train"].to_list()
    decoded = [
        tuple(tokenizer.decode(r[f"{part}_ids"]) for part in ("prompt", "chosen", "rejected")) for r in seen.rows
    ]
    # What TRL tokenized is the chat template applied to the export's messages, the history included…
    assert {p for p, _, _ in decoded} <= {rendered(tokenizer, r["prompt"], generation=True) for r in rows}
    assert {p + c for p, c, _ in decoded} <= {rendered(tokenizer, r["prompt"] + r["chosen"]) for r in rows}
    assert any(
        p.startswith(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n") for p, _, _ in decoded
    )
    assert all(
        p.endswith("<|im_start|>assistant\n") and c.endswith("<|im_end|>\n") and r.endswith("<|im_end|>\n")
        for p, c, r in decoded
    )
    # …never a question glued to its answer.
    assert not any("?It is" in p + c or "?Maybe" in p + c for p, c, _ in decoded)


def test_reward_model_trains_on_an_implicit_prompt_export_through_the_chat_template(sqlite_url, tmp_path, chat_lm):
    from transformers import AutoTokenizer

    from preflab.db.engine import open_database, session_factory
    from preflab.db.export.dataset import load_export
    from preflab.training.config import RewardTrainConfig
    from preflab.training.methods import train

    store_of(sqlite_url, tmp_path, history=True)
    # TRL advises implicit-prompt rows (the prompt inside chosen and rejected) for RewardTrainer.
    info = json.loads(run(sqlite_url, "export", tmp_path / "export", "--prompt", "implicit", "--json").stdout)
    seen = Tokenized()
    config = RewardTrainConfig(
        max_steps=2, per_device_train_batch_size=4, learning_rate=1e-3, max_length=256, use_cpu=True, logging_steps=1
    )
    result = train(
        "reward", session_factory(open_database(sqlite_url)), config, str(chat_lm), info["name"], callbacks=[seen]
    )
    assert result.metrics["global_step"] == 2 and result.metrics["heldout_accuracy"] is not None

    tokenizer = AutoTokenizer.from_pretrained(chat_lm)
    rows = run_data(result)  # made explicit for the run: the history, then each reply
    assert all(r["prompt"][-1]["role"] == "user" and r["chosen"][0]["role"] == "assistant" for r in rows)
    assert any(r["prompt"][0] == {"role": "system", "content": SYSTEM} for r in rows)
    exported = load_export(tmp_path / "export")["train"].to_list()
    assert "prompt" not in exported[0]
    whole = {rendered(tokenizer, r[side]) for r in exported for side in ("chosen", "rejected")}
    decoded = {tokenizer.decode(r[side]) for r in seen.rows for side in ("chosen_ids", "rejected_ids")}
    assert decoded <= whole
    assert any(text.startswith(f"<|im_start|>system\n{SYSTEM}<|im_end|>") for text in decoded)
    assert all("<|im_start|>user\n" in text and "<|im_start|>assistant\n" in text for text in decoded)


def test_a_plain_text_export_is_given_to_a_chat_model_as_messages(sqlite_url, tmp_path, chat_lm):
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    from preflab.training.data import for_model
    from preflab.training.grouped import prepare_groups

    store_of(sqlite_url, tmp_path, history=False)
    run(sqlite_url, "export", tmp_path / "plain", "--no-conversational", "--name", "plain")
    report = json.loads(
        run(
            sqlite_url,
            "train",
            "reward",
            "--model",
            chat_lm,
            "--dataset-version",
            "plain",
            "--grouped",
            "--max-steps",
            1,
            "--per-device-train-batch-size",
            4,
            "--use-cpu",
            "--json",
        ).stdout
    )
    rows = load_from_disk(str(Path(report["path"]).parent / "data"))["train"].to_list()
    assert all(r["prompt"] == [{"role": "user", "content": r["prompt"][0]["content"]}] for r in rows)
    assert all(len(r["chosen"]) == 1 and r["chosen"][0]["role"] == "assistant" for r in rows)
    # The grouped trainer tokenizes each candidate through the template too.
    tokenizer = AutoTokenizer.from_pretrained(chat_lm)
    split = load_from_disk(str(tmp_path / "plain"))["train"]
    groups = prepare_groups(for_model(split, tokenizer), tokenizer, 256)
    texts = [tokenizer.decode(ids) for group in groups["candidate_ids"] for ids in group]
    assert texts and all(
        t.startswith("<|im_start|>user\nWhat is ") and "?<|im_end|>\n<|im_start|>assistant\n" in t for t in texts
    )


def test_runs_stop_with_one_line_on_data_their_model_cannot_read(sqlite_url, tmp_path, chat_lm):
    from tests.tiny_models import tiny_causal_lm, tiny_tokenizer

    store_of(sqlite_url, tmp_path, history=True, prompts=8)
    base_tokenizer = tiny_tokenizer()
    base_tokenizer.chat_template = None
    base = tiny_causal_lm(tmp_path / "base", tokenizer=base_tokenizer)  # a base model: no chat template
    run(sqlite_url, "export", tmp_path / "conv", "--name", "conv")
    result = run(
        sqlite_url,
        "train",
        "dpo",
        "--model",
        base,
        "--dataset-version",
        "conv",
        "--max-steps",
        1,
        "--use-cpu",
        expect_ok=False,
    )
    assert result.exit_code == 1 and result.output.strip().splitlines() == [
        "Error: the model has no chat template, so it cannot read the conversations of several messages in "
        "dataset version conv: train a model that has one (a base model reads single-message prompts and "
        "replies, as plain text)"
    ]

    run(sqlite_url, "export", tmp_path / "text", "--chat-template", chat_lm, "--name", "text")
    result = run(
        sqlite_url,
        "train",
        "dpo",
        "--model",
        chat_lm,
        "--dataset-version",
        "text",
        "--max-steps",
        1,
        "--use-cpu",
        expect_ok=False,
    )
    assert result.exit_code == 1 and result.output.strip().splitlines() == [
        f"Error: dataset version text is text already rendered with {chat_lm}'s chat template, for other tools; "
        "training applies the model's own: export a conversational version (`preflab export`, its default) and "
        "train on that"
    ]


def test_trl_cli_trains_on_a_parquet_export_as_it_is(sqlite_url, tmp_path, chat_lm):
    store_of(sqlite_url, tmp_path, history=True, prompts=8)
    export = tmp_path / "export"
    run(sqlite_url, "export", export, "--format", "parquet")
    trl = Path(sys.executable).with_name("trl")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(tmp_path / "hf-cache"),
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    done = subprocess.run(
        [
            str(trl),
            "dpo",
            "--dataset_name",
            str(export),
            "--model_name_or_path",
            str(chat_lm),
            "--output_dir",
            str(tmp_path / "trl-out"),
            "--max_steps",
            "1",
            "--per_device_train_batch_size",
            "2",
            "--max_length",
            "256",
            "--use_cpu",
            "--dtype",
            "float32",
            "--report_to",
            "none",
            "--save_strategy",
            "no",
            "--logging_steps",
            "1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "trl-out" / "model.safetensors").is_file()
    assert "'train_loss'" in done.stdout + done.stderr
