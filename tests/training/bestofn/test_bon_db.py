"""`bon estimate --from-db` on real SQLite and Postgres: judges' scores and human rankings."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from tests.training.pictures import assert_picture

PROMPTS = 4


def brute_force(proxy, true, n):
    """Mean over every n-subset of the true value of its proxy maximum (ties split evenly)."""
    picks = []
    for subset in itertools.combinations(range(len(proxy)), n):
        best = max(proxy[i] for i in subset)
        tied = [true[i] for i in subset if proxy[i] == best]
        picks.append(sum(tied) / len(tied))
    return float(np.mean(picks))


def tiers(scores, indices):
    """Tiers of `indices`, best first, equal scores tied."""
    levels = sorted({scores[i] for i in indices}, reverse=True)
    return [[i for i in indices if scores[i] == level] for level in levels]


def borda(rankings, index):
    """Mean normalised Borda score of `index` over the rankings that ranked it (written out here)."""
    values = []
    for ranking in rankings:
        ranked = [i for tier in ranking for i in tier]
        if index not in ranked:
            continue
        tier = next(t for t in ranking if index in t)
        below = sum(len(t) for t in ranking[ranking.index(tier) + 1 :])
        values.append((below + 0.5 * (len(tier) - 1)) / (len(ranked) - 1))
    return float(np.mean(values)) if values else None


@pytest.fixture
def world(tmp_path):
    """Rankings by a proxy judge, a gold judge and two humans, as one import file.

    The last response of each prompt is left unranked by the humans, so it has no
    human reward and must not count against `--true human`.
    """
    rng = np.random.default_rng(1)
    lines, truth = [], []
    for p in range(PROMPTS):
        size = 4 + p
        responses = [f"prompt {p} answer {i}" for i in range(size)]
        gold = np.round(rng.normal(size=size), 2)
        proxy = np.round(gold + rng.normal(0, 0.7, size), 0)  # coarse: ties
        everyone = list(range(size))
        for name, scores in (("rm-proxy", proxy), ("gold-judge", gold)):
            lines.append(
                {
                    "prompt": f"prompt {p}",
                    "responses": responses,
                    "annotator": name,
                    "annotator_kind": "ai",
                    "scores": [float(s) for s in scores],
                    "ranking": tiers(scores, everyone),
                    "id": f"{name}-{p}",
                }
            )
        human_rankings = []
        for h, name in enumerate(("alice", "bob")):
            noisy = gold + rng.normal(0, 0.3, size)
            ranking = tiers(np.round(noisy, 0 if h else 1), everyone[:-1])
            human_rankings.append(ranking)
            lines.append(
                {
                    "prompt": f"prompt {p}",
                    "responses": responses,
                    "annotator": name,
                    "annotator_kind": "human",
                    "ranking": ranking,
                    "id": f"{name}-{p}",
                }
            )
        truth.append({"proxy": proxy, "gold": gold, "human": [borda(human_rankings, i) for i in range(size)]})
    path = tmp_path / "rankings.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path, truth


def test_estimate_from_db_against_humans_and_a_gold_judge(cli, world):
    path, truth = world
    cli("import", "rankings", path)

    out = json.loads(
        cli("bon", "estimate", "--from-db", "--proxy", "rm-proxy", "--true", "human", "--n", "1,2,4,6", "--json").stdout
    )
    assert list(out) == ["n", "true", "proxy", "true_stderr", "groups", "kl_bound"]
    # Humans ranked all but the last response: prompts hold 3, 4, 5, 6 usable candidates.
    assert out["groups"] == [4, 4, 3, 1]
    for j, n in enumerate(out["n"]):
        per_prompt = []
        for t in truth:
            usable = [i for i, v in enumerate(t["human"]) if v is not None]
            if len(usable) >= n:
                per_prompt.append(brute_force([t["proxy"][i] for i in usable], [t["human"][i] for i in usable], n))
        assert out["true"][j] == pytest.approx(np.mean(per_prompt))
        if len(per_prompt) > 1:
            assert out["true_stderr"][j] == pytest.approx(np.std(per_prompt, ddof=1) / np.sqrt(len(per_prompt)))

    gold = json.loads(
        cli(
            "bon", "estimate", "--from-db", "--proxy", "rm-proxy", "--true", "gold-judge", "--n", "1,3,7", "--json"
        ).stdout
    )
    assert gold["groups"] == [4, 4, 1]
    for j, n in enumerate(gold["n"]):
        want = [brute_force(t["proxy"], t["gold"], n) for t in truth if len(t["gold"]) >= n]
        assert gold["true"][j] == pytest.approx(np.mean(want))
        assert gold["proxy"][j] == pytest.approx(
            np.mean([brute_force(t["proxy"], t["proxy"], n) for t in truth if len(t["proxy"]) >= n])
        )

    text = cli("bon", "estimate", "--from-db", "--proxy", "rm-proxy", "--n", "2").stdout
    assert "proxy: rm-proxy (score)" in text


def test_judge_without_scores_is_read_by_borda(cli, world, tmp_path):
    path, truth = world
    cli("import", "rankings", path)
    # alice has no scores: her tiers give the proxy (Borda), gold-judge the truth.
    out = json.loads(
        cli("bon", "estimate", "--from-db", "--proxy", "alice", "--true", "gold-judge", "--n", "1", "--json").stdout
    )
    assert out["groups"] == [4]
    assert out["true"][0] == pytest.approx(np.mean([np.mean(t["gold"][:-1]) for t in truth]))


def test_unknown_annotator_is_one_line_error(cli, world):
    path, _ = world
    cli("import", "rankings", path)
    result = cli("bon", "estimate", "--from-db", "--proxy", "nobody", "--true", "human", expect_ok=False)
    assert result.exit_code != 0
    assert result.output.strip() == "Error: no annotator named 'nobody'"
    result = cli("bon", "estimate", "--from-db", "--true", "human", expect_ok=False)
    assert result.exit_code != 0 and "--from-db needs --proxy NAME" in result.output


def test_plot_from_db(cli, world, tmp_path):
    path, _ = world
    cli("import", "rankings", path)
    out = tmp_path / "db.png"
    cli("bon", "plot", "--from-db", "--proxy", "rm-proxy", "--true", "gold-judge", "--out", out)
    assert_picture(out)
