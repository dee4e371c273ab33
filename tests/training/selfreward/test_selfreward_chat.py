"""The self-rewarding loop on a chat model: M_0 writes its own prompts few-shot and judges its own answers."""

import json

import pytest
from sqlalchemy import select

from preflab.db.models import Annotator, Candidate, ModelVersion, Prompt, Ranking, SelfRewardIteration
from preflab.training.selfreward.data import ranking_pairs
from preflab.training.selfreward.prompts import FEW_SHOT_PROMPT, clean_reply
from tests.tiny_models import tiny_causal_lm, tiny_tokenizer
from tests.training.selfreward.selfreward_world import one_torch_thread  # noqa: F401 (fixture)

TINY_DPO = [
    "--max-steps",
    2,
    "--per-device-train-batch-size",
    4,
    "--learning-rate",
    1e-3,
    "--use-cpu",
    "--logging-steps",
    1,
    "--max-length",
    256,
]


def test_replies_are_cleaned_into_one_task():
    assert (
        clean_reply("Task 9: Name the largest planet in the solar system.\n\nTask 10: more")
        == "Name the largest planet in the solar system."
    )
    assert clean_reply('**New task:** "Explain how a rainbow forms."') == "Explain how a rainbow forms."
    assert clean_reply("Here is a new task:\nWrite a limerick about cheese.") == "Write a limerick about cheese."
    assert clean_reply(' Improve this: "It is." Task 10: Tell a story.') == 'Improve this: "It is."'
    assert clean_reply("  ok ") is None  # too short to be a task
    assert clean_reply("x" * 3000) is None
    assert clean_reply("What is\x00 a NUL\x1b byte?") == "What is a NUL byte?"  # Postgres refuses NUL


def test_the_few_shot_request_shows_every_example_in_the_chat_format(tmp_path):
    from preflab.lm.engines import open_engine
    from preflab.lm.loading import load_causal_lm
    from preflab.lm.names import NamedModel
    from preflab.training.selfreward.prompts import draw_with
    from tests.lm.conversations import recorded_inputs
    from tests.tiny_models import tiny_causal_lm

    model, tokenizer = load_causal_lm(tiny_causal_lm(tmp_path / "lm", tokenizer=tiny_tokenizer()))
    engine = open_engine(model=NamedModel("lm", "", None, model, tokenizer))
    with recorded_inputs(model, tokenizer) as seen:
        draw_with(engine, max_new_tokens=2, temperature=0.9, top_p=0.95)([["What is 2 + 2?", "Name a colour."]], 0)
    text = seen[0]
    # The reply is begun for the model, so it goes on with the next task of the list.
    assert text.startswith("<|im_start|>user\n") and text.endswith("<|im_start|>assistant\nTask 3:")
    assert "Task 1: What is 2 + 2?\n\nTask 2: Name a colour." in text
    assert FEW_SHOT_PROMPT.splitlines()[0].format(k=2) in text


def test_pairs_are_highest_against_lowest_and_ties_give_none():
    scores = {1: 4.0, 2: 2.5, 3: 4.0, 4: 1.0}
    assert ranking_pairs([[1, 3], [2], [4]], scores, "best-vs-worst") == [(1, 4, 3.0)]
    assert len(ranking_pairs([[1, 3], [2], [4]], scores, "all")) == 5  # 2·1 + 2·1 + 1·1 strict pairs
    assert ranking_pairs([[1, 2, 3]], {1: 3.0, 2: 3.0, 3: 3.0}, "best-vs-worst") == []
    assert ranking_pairs([[5], [6]], {}, "all") == [(5, 6, 1.0)]  # no scores (people): the tier gap


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_a_chat_model_writes_answers_and_judges_its_own_prompts(sqlite_url, tmp_path):
    """SQLite only: a random tiny model's samples may hold NUL bytes, which Postgres refuses in text
    (the toy-world loop runs on both databases)."""
    from importlib.resources import files

    from click.testing import CliRunner

    from preflab.cli import cli as root
    from preflab.db.engine import open_database, session_factory

    def cli(*args):
        result = CliRunner().invoke(root, ["--database-url", sqlite_url, *map(str, args)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result

    sessions = session_factory(open_database(sqlite_url))
    m0 = tiny_causal_lm(tmp_path / "m0")
    cli("import", "prompts", str(files("preflab.db.samples") / "prompts.jsonl"))
    with sessions.begin() as session:
        seeds = {p.text for p in session.scalars(select(Prompt))}
    summary = json.loads(
        cli(
            "self-reward",
            "--iterations",
            1,
            "--model",
            m0,
            "--judge",
            "likelihood",
            "--prompts-per-iteration",
            6,
            "--prompt-max-new-tokens",
            24,
            "--max-new-tokens",
            12,
            "--n",
            3,
            "--eval-max-new-tokens",
            8,
            *TINY_DPO,
            "--json",
        ).stdout
    )
    assert summary[0]["step"] == "done" and summary[0]["prompts"] == 6

    with sessions.begin() as session:
        row = session.scalars(select(SelfRewardIteration)).one()
        m0_version = session.get(ModelVersion, row.policy_id)
        written = session.scalars(select(Prompt).where(Prompt.iteration == 1)).all()
        # M_0 wrote them (its model version is their author), and none repeats a stored prompt.
        assert len(written) == 6 and {p.model_version_id for p in written} == {m0_version.id}
        assert not {p.text for p in written} & seeds and all(p.source == "self-reward:default" for p in written)
        candidates = session.scalars(select(Candidate).where(Candidate.iteration == 1)).all()
        assert {c.prompt_id for c in candidates} == {p.id for p in written}
        assert {c.sampling["temperature"] for c in candidates} == {0.7}
        # Self-rewarding: the judge is M_0 itself.
        rankings = session.scalars(select(Ranking).where(Ranking.iteration == 1)).all()
        judge = session.get(Annotator, rankings[0].annotator_id)
        assert (judge.judge_kind, judge.model) == ("likelihood", m0_version.name) and len(rankings) == 6
        policy = session.get(ModelVersion, row.model_version_id)
        assert (policy.kind, policy.parent_id, policy.iteration) == ("policy", m0_version.id, 1)
        # No held-out split yet: a fifth of the 24 stored prompts were kept for the evaluation.
        assert len(row.state["eval_prompt_ids"]) == 4 and row.metrics["eval"]["prompts"] == 4
        assert not set(row.state["eval_prompt_ids"]) & {p.id for p in written}


def test_bad_settings_are_one_clear_sentence(cli):
    result = cli("self-reward", "--iterations", 1, "--judge", "reward-model", expect_ok=False)
    assert result.exit_code == 1
    assert result.output.strip() == "Error: --judge reward-model needs --judge-model: the reward model to score with"
    result = cli("self-reward", "--iterations", 1, "--n", 1, expect_ok=False)
    assert "--n must be at least 2" in result.output
    result = cli("self-reward", "report", expect_ok=False)
    assert result.exit_code == 1 and "there is no self-reward loop named 'default'" in result.output


def test_a_new_loop_reads_expected_scores_and_an_older_loop_keeps_sampling(sessions):
    from preflab.labelling.judges.identity import identity
    from preflab.training.selfreward.config import loop_settings

    with sessions.begin() as session:
        config, _ = loop_settings(session, "new", {}, {}, "smollm2-135m-instruct")
        assert config.judge_method == "expected" and config.judge_config().method == "expected"
        # The judge's identity ignores the sampling settings the expected method does not read.
        assert "samples" not in identity("score", config.judge_config())

        # A loop stored before the score judge had methods sampled its scores; resumed, it still does.
        base = ModelVersion(name="m0", kind="base")
        session.add(base)
        session.flush()
        session.add(
            SelfRewardIteration(
                loop="old",
                iteration=1,
                step="done",
                policy_id=base.id,
                config={"loop": {"model": "m0", "judge": "score", "judge_samples": 3}},
            )
        )
        session.flush()
        old, _ = loop_settings(session, "old", {}, {}, "smollm2-135m-instruct")
        assert old.judge_method == "sampled" and old.judge_config().n == 3
        chosen, _ = loop_settings(session, "old", {"judge_method": "expected"}, {}, "smollm2-135m-instruct")
        assert chosen.judge_method == "expected"
