"""`preflab self-reward` in the digit toy world: two iterations end to end, lineage, people mixed in."""

import json
from collections import Counter

import pytest
from sqlalchemy import func, select

from preflab.db.models import (
    Annotator,
    Candidate,
    DatasetVersion,
    ModelVersion,
    Prompt,
    Ranking,
    SelfRewardIteration,
    TrainingRun,
)
from tests.training.pictures import assert_picture
from tests.training.selfreward.selfreward_world import human_rankings_of, one_torch_thread, toy_base, toy_world  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


def test_two_iterations_end_to_end_with_lineage_people_and_report(cli, sessions, toy_world, tmp_path):
    first = json.loads(cli("self-reward", "--iterations", 1, *toy_world.loop_args(), "--json").stdout)
    assert [(s["iteration"], s["step"]) for s in first] == [(1, "done")]

    # People rank iteration 1's candidates after it finished; iteration 2 mixes their rankings in.
    ranked = human_rankings_of(sessions, 1, tmp_path / "people.jsonl")
    assert ranked > 10
    cli("import", "rankings", tmp_path / "people.jsonl")
    second = json.loads(cli("self-reward", "--iterations", 2, *toy_world.loop_args(), "--with-human", "--json").stdout)
    assert [(s["iteration"], s["step"]) for s in second] == [(2, "done")]
    assert second[0]["pairs"]["human"] > 0 and second[0]["pairs"]["judge"] > 0
    # Asking for two iterations again finds nothing to do.
    again = cli("self-reward", "--iterations", 2)
    assert "nothing to do" in again.stdout

    with sessions.begin() as session:
        rows = session.scalars(select(SelfRewardIteration).order_by(SelfRewardIteration.iteration)).all()
        m0 = session.get(ModelVersion, rows[0].policy_id)
        m1 = session.get(ModelVersion, rows[0].model_version_id)
        m2 = session.get(ModelVersion, rows[1].model_version_id)
        # Lineage: M_0 → M_1 → M_2, each trained from its parent on its own iteration's dataset.
        assert (m0.kind, m0.path) == ("base", str(toy_world.base))
        assert (m1.parent_id, m1.iteration, m2.parent_id, m2.iteration) == (m0.id, 1, m1.id, 2)
        assert rows[1].policy_id == m1.id
        runs = session.scalars(select(TrainingRun).order_by(TrainingRun.id)).all()
        assert [(r.kind, r.status, r.iteration) for r in runs] == [("dpo", "succeeded", 1), ("dpo", "succeeded", 2)]
        assert [(r.base_model_version_id, r.output_model_version_id) for r in runs] == [(m0.id, m1.id), (m1.id, m2.id)]
        datasets = [session.get(DatasetVersion, r.dataset_version_id) for r in runs]
        assert [d.iteration for d in datasets] == [1, 2]
        assert [d.id for d in datasets] == [rows[0].dataset_version_id, rows[1].dataset_version_id]
        assert datasets[1].settings["with_human"] is True and datasets[0].settings["with_human"] is False

        for t, author in ((1, m0), (2, m1)):
            prompts = session.scalars(select(Prompt).where(Prompt.iteration == t)).all()
            assert len(prompts) == 160 and {p.source for p in prompts} == {"self-reward:default"}
            ids = [p.id for p in prompts]
            candidates = session.scalars(select(Candidate).where(Candidate.prompt_id.in_(ids))).all()
            assert {(c.iteration, c.model_version_id, c.model) for c in candidates} == {(t, author.id, author.name)}
            assert len(candidates) >= 2 * len(prompts)
            judged = session.scalars(select(Ranking).where(Ranking.prompt_id.in_(ids), Ranking.source == "judge")).all()
            # A judge ranks every prompt with two candidates or more (a sharpened policy may repeat itself).
            per_prompt = Counter(c.prompt_id for c in candidates)
            assert {r.prompt_id for r in judged} == {pid for pid, n in per_prompt.items() if n >= 2}
            assert len(judged) > 0.9 * len(prompts) and {r.iteration for r in judged} == {t}
            judge = session.get(Annotator, judged[0].annotator_id)
            assert (judge.kind, judge.judge_kind, judge.model) == ("ai", "reward-model", str(toy_world.reward_model))
        # The people's rankings kept their own provenance: no iteration, human annotator.
        assert (
            session.scalar(
                select(func.count()).select_from(Ranking).where(Ranking.source == "import", Ranking.iteration.is_(None))
            )
            == ranked
        )

    report = json.loads(cli("self-reward", "report", "--plot", tmp_path / "loop.png", "--json").stdout)
    it1, it2 = report["iterations"]
    # The reward-model judge agrees with the simulated people on iteration 1, which they ranked.
    assert it1["judge_agreement"]["shared_pairs"] > 20 and it1["judge_agreement"]["pairwise_agreement"] > 0.85
    assert it2["judge_agreement"]["pairwise_agreement"] is None  # nobody ranked iteration 2 yet
    assert it1["win_rate"] > 0.5 and it1["eval_prompts"] == 20, json.dumps([it1, it2])
    assert report["plot"] == str(tmp_path / "loop.png")
    assert assert_picture(tmp_path / "loop.png") == (715, 440)  # 6.5 × 4 inches at 110 dpi
    table = cli("self-reward", "report", "--plot", tmp_path / "again.png").stdout
    assert "policy-" in table and "judge~people" in table

    # The loop learned the hidden preference: the preferred first digit is far likelier after two iterations.
    from transformers import AutoModelForCausalLM

    from preflab.training.demos import toy_world as toy

    after = toy.policy_report(
        AutoModelForCausalLM.from_pretrained(m2.path),
        AutoModelForCausalLM.from_pretrained(toy_world.base),
        toy_world.eval_digits,
    )
    assert after["p_preferred_policy"] > after["p_preferred_base"] + 0.25, after
