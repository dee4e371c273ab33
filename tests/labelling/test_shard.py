"""`--shard K/N`: the K-th of N fixed slices of the stored prompts, by their content hash.

N workers (a Slurm array, a Kubernetes indexed Job) each take one slice of one store:
the slices must cover every prompt exactly once, whatever the database, and a prompt
must fall in the same slice on every machine and every run.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from preflab.db.models import Candidate, Prompt, Ranking
from preflab.db.store import content_hash
from preflab.labelling.selection import PromptSelection, selected_prompt_ids, shard_of
from tests.properties import examples
from tests.tiny_models import tiny_causal_lm
from tests.toy_data import one_thread  # noqa: F401 (fixture)

# Twelve prompts and the slice each falls in for N = 3: their content hashes fix it on every machine and database.
PROMPTS = [f"Question {i}: what is {i} plus {i}?" for i in range(12)]
SLICE_OF_3 = [1, 0, 1, 2, 2, 2, 2, 0, 2, 0, 2, 2]


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    return tiny_causal_lm(tmp_path_factory.mktemp("models") / "tiny-lm")


def write_prompts(path, prompts=PROMPTS, responses=0):
    lines = [
        {"prompt": p, **({"responses": [f"Answer {r} to {p}" for r in range(responses)]} if responses else {})}
        for p in prompts
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def stored(cli, sessions, tmp_path) -> dict[str, int]:
    """PROMPTS imported, each with two responses to judge; text -> prompt id."""
    cli("import", "prompts", write_prompts(tmp_path / "prompts.jsonl", responses=2))
    with sessions.begin() as session:
        return dict(session.execute(select(Prompt.text, Prompt.id)).all())


def in_slice(k: int, stored: dict[str, int]) -> list[int]:
    return sorted(stored[p] for p, s in zip(PROMPTS, SLICE_OF_3) if s == k)


def shard_ids(sessions, shard: str, **selection) -> list[int] | None:
    with sessions.begin() as session:
        return selected_prompt_ids(session, PromptSelection(shard=shard, **selection))


def test_each_prompt_falls_in_the_slice_its_content_hash_gives_on_every_database(sessions, stored):
    assert [shard_of(content_hash(p), 3) for p in PROMPTS] == SLICE_OF_3
    for k in range(3):
        assert shard_ids(sessions, f"{k}/3") == in_slice(k, stored)
    assert shard_ids(sessions, "0/1") == sorted(stored.values())
    assert shard_ids(sessions, " 2/3 ") == in_slice(2, stored)


def test_the_slices_partition_every_selection(sessions, stored):
    """Any N, of every stored prompt or of the ids given: the slices are disjoint, their union the selection."""
    ids = sorted(stored.values())

    @settings(max_examples=examples(30))
    @given(n=st.integers(1, 16), among=st.none() | st.lists(st.sampled_from(ids), min_size=1, unique=True))
    def slices_partition(n, among):
        prompt_id = None if among is None else ",".join(map(str, among))
        slices = [shard_ids(sessions, f"{k}/{n}", prompt_id=prompt_id) for k in range(n)]
        chosen = [pid for part in slices for pid in part]
        assert sorted(chosen) == sorted(ids if among is None else among)
        assert len(chosen) == len(set(chosen))
        assert slices == [shard_ids(sessions, f"{k}/{n}", prompt_id=prompt_id) for k in range(n)]
        if among is not None:  # in the order the ids were given, as --prompt-id keeps it
            assert all(part == [pid for pid in among if pid in part] for part in slices)

    slices_partition()


BAD = ["3/3", "4/3", "0/0", "-1/3", "x", "1", "1/", "/3", "1/3/5", "1.0/3"]


def test_a_bad_shard_is_one_sentence_and_a_non_zero_exit_before_any_work(tmp_path):
    from click.testing import CliRunner

    from preflab.cli import cli

    database = tmp_path / "never.db"
    for command in (["generate"], ["judge", "likelihood"]):
        for shard in BAD:
            result = CliRunner().invoke(cli, ["--database-url", f"sqlite:///{database}", *command, "--shard", shard])
            assert result.exit_code != 0
            message = result.output.strip()
            assert "Traceback" not in message and len(message.splitlines()) == 1, message
            assert f"--shard takes K/N, slice K of N counted from 0 (0/8 to 7/8), got {shard!r}" in message
    assert not database.exists()


def candidates_by_prompt(sessions, model: str) -> dict[int, int]:
    with sessions.begin() as session:
        return dict(
            session.execute(
                select(Candidate.prompt_id, func.count()).where(Candidate.model == model).group_by(Candidate.prompt_id)
            ).all()
        )


def test_limit_counts_within_the_shard(cli, sessions, stored, tiny_lm):
    """--limit 2 with --shard 2/3: the first 2 prompts of slice 2 short of N, the rest of the slice waiting."""
    args = ["--model", tiny_lm, "generate", "-n", 1, "--max-new-tokens", 3, "--shard", "2/3", "--json"]
    first = json.loads(cli(*args, "--limit", 2).stdout)
    mine, model = in_slice(2, stored), first["model"]
    assert first["prompts"] == 2 and first["waiting"] == len(mine) - 2
    assert sorted(candidates_by_prompt(sessions, model)) == mine[:2]
    again = json.loads(cli(*args, "--limit", 2).stdout)
    assert again["prompts"] == 2 and again["waiting"] == len(mine) - 4
    assert sorted(candidates_by_prompt(sessions, model)) == mine[:4]
    rest = json.loads(cli(*args).stdout)
    assert rest["prompts"] == len(mine) - 4 and rest["waiting"] == 0
    assert sorted(candidates_by_prompt(sessions, model)) == mine
    done = cli(*args[:-1], "--limit", 2)
    assert done.stdout.startswith("generated 0 candidates for 0 prompts")


def test_an_empty_slice_is_no_error(cli, sessions, stored, tiny_lm):
    """With more workers than prompts some slices hold none: those workers finish at once, with exit status 0."""
    n = 64
    empty = next(k for k in range(n) if k not in {shard_of(content_hash(p), n) for p in PROMPTS})
    result = json.loads(cli("--model", tiny_lm, "generate", "--shard", f"{empty}/{n}", "--json").stdout)
    assert result["prompts"] == result["stored"] == 0


def rankings_by_prompt(sessions) -> dict[int, int]:
    with sessions.begin() as session:
        return dict(
            session.execute(
                select(Ranking.prompt_id, func.count()).where(Ranking.source == "judge").group_by(Ranking.prompt_id)
            ).all()
        )


def test_judge_shards_rank_their_slices_once_each(cli, sessions, stored, tiny_lm):
    judge = ["--model", tiny_lm, "judge", "likelihood", "--json"]
    for k in range(3):
        result = json.loads(cli(*judge, "--shard", f"{k}/3").stdout)
        assert result["ranked"] == result["prompts"] == len(in_slice(k, stored)) and result["kept"] == 0
        assert sorted(rankings_by_prompt(sessions)) == sorted(p for j in range(k + 1) for p in in_slice(j, stored))
    again = json.loads(cli(*judge, "--shard", "1/3").stdout)
    assert again["ranked"] == 0 and again["kept"] == len(in_slice(1, stored))
    assert set(rankings_by_prompt(sessions).values()) == {1}
    whole = json.loads(cli(*judge).stdout)  # the same judge: one annotator for every shard
    assert whole["ranked"] == 0 and whole["kept"] == len(PROMPTS)
