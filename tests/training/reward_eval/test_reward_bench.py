"""`preflab train eval` on reward models: the bench on real stores and tiny real models, RewardBench's way."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from preflab.db.models import ModelVersion
from tests.tiny_models import tiny_reward_model

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

TOPICS = {
    "math": ["What is {a} plus {b}?", "Is {a} larger than {b}?"],
    "chat": ["Tell me about the number {a}.", "Say hello to {b} friends."],
}


def _conversations(path, n=24):
    """Rankings of three replies to multi-turn conversations (no system turn: RewardBench reads turns by position)."""
    rows = []
    for i in range(n):
        category = "math" if i % 2 else "chat"
        question = TOPICS[category][i % 4 // 2].format(a=i, b=i + 3)
        prompt = [
            {"role": "user", "content": f"Hello, I have question {i}."},
            {"role": "assistant", "content": "Of course, ask away."},
            {"role": "user", "content": question},
        ]
        replies = [f"The answer is {i + 3}.", f"Maybe {i}, I think, or perhaps something else entirely.", "No."]
        rows.append(
            {
                "id": f"r{i}",
                "prompt": prompt,
                "responses": replies,
                "ranking": [[0], [1], [2]],
                "annotator": "alice" if i % 3 else "judge-x",
                "annotator_kind": "human" if i % 3 else "ai",
                "source": category,
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def bench_store(cli, sessions, tmp_path):
    """A store of ranked conversations exported with half the prompts held out, and two tiny reward models."""
    cli("import", "rankings", _conversations(tmp_path / "rankings.jsonl"))
    cli("pairs", "build")
    cli("export", tmp_path / "export", "--test-size", 0.5, "--annotators", "any", "--name", "held")
    with sessions.begin() as session:
        for seed in (0, 1):
            path = tiny_reward_model(tmp_path / f"rm-{seed}", seed=seed)
            session.add(ModelVersion(name=f"rm-{seed}", kind="reward", path=str(path)))
    return tmp_path


def _test_split(tmp_path):
    from preflab.training.data import load_splits

    return load_splits(str(tmp_path / "export"))["test"]


def test_bench_breaks_accuracy_down_and_is_stored(cli, sessions, bench_store):
    from preflab.lm.loading import load_sequence_scorer
    from preflab.lm.scoring import pair_rewards

    report = json.loads(cli("train", "eval", "rm-0", "--dataset-version", "held", "--bootstrap", 300, "--json").stdout)
    bench = report["bench"]
    test = _test_split(bench_store)
    # Strict, pair by pair, on the prompt's messages plus the reply (the chat template reads the whole history).
    model, tokenizer = load_sequence_scorer(str(bench_store / "rm-0"))
    assert isinstance(test[0]["prompt"], list) and len(test[0]["prompt"]) == 3
    chosen, rejected = pair_rewards(model, tokenizer, test["prompt"], test["chosen"], test["rejected"])
    right = sum(c > r for c, r in zip(chosen, rejected))
    assert report["heldout_accuracy"] == bench["accuracy"] == right / len(test)
    assert bench["pairs"] == len(test) and bench["prompts"] == len(set(test["prompt_id"]))
    assert bench["low"] <= bench["accuracy"] <= bench["high"] and bench["bootstrap"] == 300
    # Categories are the `source` the rankings gave their prompts; kinds and margins as exported.
    assert {row["group"] for row in bench["by_category"]} == {"math", "chat"}
    assert sum(row["pairs"] for row in bench["by_category"]) == len(test)
    assert {row["group"] for row in bench["by_annotator_kind"]} == set(test["annotator_kind"])
    assert {row["group"] for row in bench["by_margin"]} == {"1", "2"}  # three tiers: gaps of one and two
    # In every pair the rejected reply "No." or the rambling one differs in length from the chosen.
    shorter, longer = bench["length_bias"]["rows"]
    assert shorter["pairs"] + longer["pairs"] + bench["length_bias"]["same_length"] == len(test)
    assert bench["position"]["applies"] is False
    with sessions.begin() as session:
        stored = session.scalar(select(ModelVersion.metrics).where(ModelVersion.name == "rm-0"))
    assert stored["eval"] == report
    # The same command and seed give the same numbers.
    again = json.loads(cli("train", "eval", "rm-0", "--dataset-version", "held", "--bootstrap", 300, "--json").stdout)
    assert again == report


def test_compare_gives_the_paired_difference_on_the_same_pairs(cli, sessions, bench_store):
    alone = json.loads(cli("train", "eval", "rm-1", "--dataset-version", "held", "--bootstrap", 0, "--json").stdout)
    report = json.loads(
        cli(
            "train", "eval", "rm-0", "--dataset-version", "held", "--compare", "rm-1", "--bootstrap", 300, "--json"
        ).stdout
    )
    compared = report["compare"]
    with sessions.begin() as session:
        metrics = dict(session.execute(select(ModelVersion.name, ModelVersion.metrics)).all())
    assert compared["other"] == "rm-1" and compared["pairs"] == report["heldout_pairs"] == alone["heldout_pairs"]
    assert compared["accuracy"]["accuracy"] == report["heldout_accuracy"]
    assert compared["other_accuracy"]["accuracy"] == alone["heldout_accuracy"]
    assert compared["difference"] == pytest.approx(report["heldout_accuracy"] - alone["heldout_accuracy"])
    n = compared["pairs"]
    assert compared["only_this"] - compared["only_other"] == round(compared["difference"] * n)
    assert compared["both_right"] + compared["only_this"] + compared["only_other"] + compared["both_wrong"] == n
    assert 0 < compared["p_value"] <= 1 and compared["low"] <= compared["difference"] <= compared["high"]
    # Stored with the version evaluated; the other's own evaluation is left as it was.
    assert metrics["rm-0"]["eval"] == report and metrics["rm-1"]["eval"] == alone
    # The text names both models, the difference and its p-value.
    text = cli("train", "eval", "rm-0", "--dataset-version", "held", "--compare", "rm-1", "--bootstrap", 300).stdout
    assert "held-out accuracy" in text and "by category:" in text and "against rm-1 on the same pairs" in text
    assert "p = " in text and "position: does not apply" in text and "a tie counts as wrong" in text


def test_compare_refuses_a_policy_and_the_model_itself(cli, sessions, bench_store):
    with sessions.begin() as session:
        session.add(ModelVersion(name="policy-1", kind="policy", path=str(bench_store / "rm-1")))
    result = cli("train", "eval", "rm-0", "--dataset-version", "held", "--compare", "policy-1", expect_ok=False)
    assert result.exit_code != 0 and "--compare takes a reward model or a pair ranker" in result.output
    result = cli("train", "eval", "rm-0", "--dataset-version", "held", "--compare", "rm-0", expect_ok=False)
    assert result.exit_code != 0 and "--compare names rm-0 itself" in result.output
    result = cli("train", "eval", "policy-1", "--compare", "rm-0", expect_ok=False)
    assert result.exit_code != 0 and "compare a policy with another model with --against" in result.output
    with sessions.begin() as session:  # nothing was stored by either refusal
        assert not any(session.scalars(select(ModelVersion.metrics).where(ModelVersion.metrics.is_not(None))))


def _rewardbench_texts(tokenizer, example):
    """RewardBench 0.1.4's `prepare_dialogue_from_tokenizer` (rewardbench/utils.py), its multi-turn branch.

    Written out because the package pins transformers 4.51, which does not install beside
    this project's pins: the prompt's turns alternate user and assistant by position, the
    reply is appended as the assistant's, and the chat template renders the text.
    """
    messages = []
    for i, line in enumerate(example["prompt"]):
        messages.append({"role": "user" if (i + 1) % 2 == 1 else "assistant", "content": line["content"]})
    assert messages[-1]["role"] == "user"
    out = {}
    for side in ("chosen", "rejected"):
        out[side] = tokenizer.apply_chat_template(
            [*messages, {"role": "assistant", "content": example[side][0]["content"]}], tokenize=False
        )
    return out["chosen"], out["rejected"]


def test_same_accuracy_as_rewardbench_on_the_same_pairs(cli, bench_store):
    """RewardBench's path: chat-template text, transformers' text-classification pipeline, `chosen > rejected`."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    report = json.loads(cli("train", "eval", "rm-1", "--dataset-version", "held", "--bootstrap", 0, "--json").stdout)
    path = str(bench_store / "rm-1")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path)
    reward_pipe = pipeline("text-classification", model=model, tokenizer=tokenizer, device="cpu")
    kwargs = {"batch_size": 1, "truncation": True, "max_length": 2048, "function_to_apply": "none"}
    results, theirs = [], []
    test = _test_split(bench_store)
    for example in test:
        text_chosen, text_rejected = _rewardbench_texts(tokenizer, example)
        chosen, rejected = reward_pipe([text_chosen], **kwargs), reward_pipe([text_rejected], **kwargs)
        results.append(1 if chosen[0]["score"] > rejected[0]["score"] else 0)
        theirs.append((chosen[0]["score"], rejected[0]["score"]))
    assert report["heldout_accuracy"] == sum(results) / len(results)
    assert report["bench"]["ties"] == 0
    # Not by luck: each reply gets the same score both ways (the same tokens read).
    from preflab.lm.scoring import pair_rewards

    ours = zip(*pair_rewards(model, tokenizer, test["prompt"], test["chosen"], test["rejected"]))
    assert [pytest.approx(pair, abs=1e-5) for pair in ours] == theirs


def test_the_report_shows_the_bench_and_the_comparison(cli, bench_store):
    cli("train", "eval", "rm-0", "--dataset-version", "held", "--compare", "rm-1", "--bootstrap", 200)
    out = bench_store / "report.html"
    cli("report", out)
    html = out.read_text()
    section = html.split('id="reward-bench"', 1)[1].split("</table>", 1)[0]
    assert "rm-0" in section and "rm-1" in section and "held" in section
    assert "math" in section and "chat" in section and "p = " in section
    assert "n/a: scores each reply alone" in section
    assert "alice" not in html  # a person only by pseudonym; the AI judge (judge-x) shows its name
