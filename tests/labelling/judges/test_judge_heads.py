"""The reward-model judge on a multi-objective reward model: one head (`--head`), or a rule over them (`--combine`).

A tiny two-head model whose heads are named harmlessness and helpfulness, its scoring layer scaled so that its
heads' differences pass the tie margin: `--head` ranks by that head's score exactly (read here by a plain
forward pass) and the rankings carry its criterion; `--combine lexicographic:…` orders each prompt as a
sort by the first head's tiers, then the second's, computed here on its own; a two-head model without either
option, a head it does not have, and a one-head model given a head are each one sentence. SQLite and Postgres.
"""

from __future__ import annotations

import json

from sqlalchemy import select

from preflab.db.models import Annotator, Ranking
from tests.labelling.judges.test_judges import ANSWERS, QUESTION, judge_rankings, ranked_by_humans  # noqa: F401
from tests.tiny_models import tiny_reward_model, two_head_reward_model

MARGIN = 1.0  # preflab.db.export.heads.TIE_MARGIN


def vectors(path, prompt: str, replies: list[str]) -> dict[str, list[float]]:
    from preflab.lm.loading import load_sequence_scorer
    from preflab.lm.scoring import exchange, reward_vectors

    model, tokenizer = load_sequence_scorer(path, heads=True)
    inputs = [
        exchange([{"role": "user", "content": prompt}], [{"role": "assistant", "content": r}], False) for r in replies
    ]
    return dict(zip(replies, reward_vectors(model, tokenizer, [p for p, _ in inputs], [r for _, r in inputs])))


def tiers(scores: dict[str, float]) -> dict[str, int]:
    """Each reply's tier by score, best first, a tier holding the replies within MARGIN of its best."""
    out, top, tier = {}, None, -1
    for reply, score in sorted(scores.items(), key=lambda kv: -kv[1]):
        if top is None or top - score > MARGIN:
            top, tier = score, tier + 1
        out[reply] = tier
    return out


def test_one_head_or_a_rule_over_them(cli, sessions, ranked_by_humans, tmp_path):
    model = two_head_reward_model(tmp_path / "heads")
    heads = vectors(model, QUESTION, ANSWERS)

    safe = json.loads(cli("judge", "reward-model", model, "--head", "harmlessness", "--json").stdout)
    assert safe["ranked"] == 2 and safe["criterion"] == "harmlessness"
    (row,) = [r for r in judge_rankings(sessions, "reward-model") if len(r[4]) == 3]
    with sessions.begin() as s:
        from preflab.db.models import Candidate

        texts = dict(s.execute(select(Candidate.id, Candidate.text).where(Candidate.id.in_(list(row[4])))).all())
        assert {
            c
            for (c,) in s.execute(
                select(Ranking.criterion)
                .join(Annotator, Annotator.id == Ranking.annotator_id)
                .where(Annotator.judge_kind == "reward-model")
            )
        } == {"harmlessness"}
    for cid, (score, details) in row[4].items():
        assert score == round(heads[texts[cid]][0], 6) and details["heads"] == [round(v, 6) for v in heads[texts[cid]]]

    combined = json.loads(
        cli("judge", "reward-model", model, "--combine", "lexicographic:harmlessness,helpfulness", "--json").stdout
    )
    assert combined["ranked"] == 2 and combined["criterion"] == "overall" and combined["run_id"] != safe["run_id"]
    (row,) = [r for r in judge_rankings(sessions, "reward-model") if len(r[4]) == 3 and r[2] == combined["run_id"]]
    first = tiers({t: v[0] for t, v in heads.items()})
    second = tiers({t: v[1] for t, v in heads.items()})
    expected = sorted(ANSWERS, key=lambda t: (first[t], second[t]))
    got = [texts[c] for tier in row[3] for c in tier]
    assert [(first[t], second[t]) for t in got] == [(first[t], second[t]) for t in expected]
    assert len({(first[t], second[t]) for t in ANSWERS}) > 1  # the model tells some replies apart

    neither = cli("judge", "reward-model", model, expect_ok=False)
    assert (
        neither.exit_code != 0
        and "has 2 heads (harmlessness, helpfulness): read one with --head NAME, or combine them with --combine RULE"
        in neither.output
    )
    unknown = cli("judge", "reward-model", model, "--head", "honesty", expect_ok=False)
    assert unknown.exit_code != 0 and "has no head 'honesty' (its heads: harmlessness, helpfulness)" in unknown.output
    one = tiny_reward_model(tmp_path / "one")
    single = cli("judge", "reward-model", one, "--head", "helpfulness", expect_ok=False)
    assert single.exit_code != 0 and "has one head: it takes no --head NAME or --combine RULE" in single.output
