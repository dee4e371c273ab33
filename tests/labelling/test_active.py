"""Active selection: each strategy picks what it claims, on constructed cases.

The pickers are checked on numbers built to have one right answer; the store job
(`select_prompts`) on real databases with AI rankings imported as a user imports
them, and on tiny real reward models (tests/tiny_models.py).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from preflab.errors import ConfigError, InputError
from preflab.labelling.active import (
    SelectConfig,
    pick_disagreement,
    pick_diversity,
    pick_random,
    pick_uncertainty,
)
from preflab.labelling.active_store import last_layer_features, select_prompts
from tests.db.helpers import ranking_line, write_lines
from tests.tiny_models import tiny_reward_model
from tests.toy_data import one_thread  # noqa: F401  (fixture: tiny models on one thread)


def test_random_is_a_seeded_uniform_draw():
    pool = list(range(100))
    first = pick_random(pool, 10, seed=1)
    assert len({c.prompt_id for c in first}) == 10 and all(c.prompt_id in pool for c in first)
    assert first == pick_random(pool, 10, seed=1)
    assert [c.prompt_id for c in first] != [c.prompt_id for c in pick_random(pool, 10, seed=2)]
    # Uniform: over many seeds every prompt is drawn about equally often.
    counts = [0] * 100
    for seed in range(2000):
        for c in pick_random(pool, 10, seed):
            counts[c.prompt_id] += 1
    assert min(counts) > 140 and max(counts) < 260  # expected 200 each
    assert len(pick_random([1, 2], 5)) == 2


def test_disagreement_picks_the_prompts_whose_rankings_differ_most():
    rankings = {
        1: [[[10], [11], [12]], [[10], [11], [12]]],  # the judges agree
        2: [[[20], [21], [22]], [[22], [21], [20]]],  # reversed
        3: [[[30], [31], [32]], [[31], [30], [32]]],  # one adjacent swap: tau-b 1/3
        4: [[[40], [41], [42]]],  # one ranking: nothing to compare
    }
    chosen = pick_disagreement(rankings, 3)
    assert [c.prompt_id for c in chosen] == [2, 3, 1]
    assert chosen[0].score == pytest.approx(1.0) and chosen[1].score == pytest.approx(1 / 3)
    assert chosen[2].score == pytest.approx(0.0)
    assert "tau-b 0.333" in chosen[1].reason


def test_uncertainty_with_one_model_picks_the_smallest_score_gaps():
    scores = {1: [[0.0, 5.0, 10.0]], 2: [[0.0, 0.05, 3.0]], 3: [[1.0, 1.001]], 4: [[2.0, 6.0]]}
    chosen = pick_uncertainty(scores, 4)
    assert [c.prompt_id for c in chosen] == [3, 2, 4, 1]
    assert chosen[0].score == pytest.approx(1.0, abs=1e-5)  # a gap of 0.001: a coin flip, one bit
    assert "as small as 0.0010" in chosen[0].reason


def test_uncertainty_with_an_ensemble_picks_where_the_members_differ_most():
    # Members agree on prompt 1's gaps even though they are small; they contradict each other on prompt 2.
    scores = {
        1: [[0.0, 0.1], [5.0, 5.1], [-3.0, -2.9]],  # shifted, same gaps: no disagreement
        2: [[0.0, 2.0], [0.0, -2.0], [0.0, 0.0]],
        3: [[0.0, 1.0], [0.0, 1.5], [0.0, 0.5]],
    }
    chosen = pick_uncertainty(scores, 3)
    assert [c.prompt_id for c in chosen] == [2, 3, 1]
    assert chosen[2].score == pytest.approx(0.0, abs=1e-9)
    assert chosen[0].score == pytest.approx(2.0)  # std of (2, -2, 0)
    assert "3 reward models" in chosen[0].reason


def _along(direction: int, spread: float, dim: int = 3) -> np.ndarray:
    features = np.zeros((2, dim))
    features[1, direction] = spread
    return features


def test_diversity_spreads_the_batch_over_directions_not_yet_covered():
    # Ten prompts whose candidates differ along axis 0 (the biggest spreads), one along axis 1, one along 2.
    features = {pid: _along(0, 3.0 - 0.01 * pid) for pid in range(10)}
    features[10], features[11] = _along(1, 1.5), _along(2, 1.0)
    chosen = [c.prompt_id for c in pick_diversity(features, 3)]
    assert chosen[0] == 0 and sorted(chosen[1:]) == [10, 11]  # not a second axis-0 prompt
    # Axis 0 already ranked by people: the batch starts on the other axes.
    covered = pick_diversity(features, 2, labelled={99: _along(0, 5.0)})
    assert [c.prompt_id for c in covered] == [10, 11]
    # Near-duplicate candidates (no spread) teach nothing and come last.
    features[12] = _along(1, 1e-6)
    assert pick_diversity(features, 13)[-1].prompt_id == 12


def test_diversity_weights_pairs_by_the_reward_models_uncertainty():
    # Same feature spreads; the reward model is already sure about prompt 1's pair (gap 8), not prompt 2's.
    features = {1: _along(0, 2.0), 2: _along(1, 2.0)}
    chosen = pick_diversity(features, 2, scores={1: [0.0, 8.0], 2: [0.0, 0.1]})
    assert [c.prompt_id for c in chosen] == [2, 1] and chosen[0].score > 10 * chosen[1].score


def test_lazy_greedy_equals_the_plain_greedy():
    rng = np.random.default_rng(0)
    features = {pid: rng.normal(size=(4, 6)) * rng.uniform(0.1, 2.0) for pid in range(40)}
    scores = {pid: rng.normal(size=4).tolist() for pid in features}
    lazy = pick_diversity(features, 8, scores=scores)

    def rows(pid):
        out = []
        for i, j in itertools.combinations(range(4), 2):
            p = 1 / (1 + math.exp(-(scores[pid][i] - scores[pid][j])))
            out.append(math.sqrt(p * (1 - p)) * (features[pid][i] - features[pid][j]))
        return np.array(out)

    info, plain = np.eye(6), []
    for _ in range(8):
        gains = {
            pid: np.linalg.slogdet(info + rows(pid).T @ rows(pid))[1] - np.linalg.slogdet(info)[1]
            for pid in features
            if pid not in plain
        }
        best = max(gains, key=lambda pid: (gains[pid], -pid))
        plain.append(best)
        info = info + rows(best).T @ rows(best)
    assert [c.prompt_id for c in lazy] == plain
    assert all(a.score >= b.score - 1e-12 for a, b in itertools.pairwise(lazy))  # gains only shrink


def test_select_config_checks_its_options():
    with pytest.raises(ConfigError, match="needs --reward-model"):
        SelectConfig(select="uncertainty")
    with pytest.raises(ConfigError, match="must be one of"):
        SelectConfig(select="loudest")
    with pytest.raises(ConfigError, match="one --reward-model"):
        SelectConfig(select="diversity", reward_model="a,b")
    assert SelectConfig(select="uncertainty", reward_model=" a , b ").reward_models == ["a", "b"]


FILES = itertools.count()


def _import(sessions, tmp_path, lines) -> dict[str, int]:
    from sqlalchemy import select

    from preflab.db.ingest.jsonl import import_file, import_rankings_batch
    from preflab.db.models import Prompt

    import_file(sessions, write_lines(tmp_path / f"rankings-{next(FILES)}.jsonl", lines), import_rankings_batch)
    with sessions.begin() as session:
        return dict(session.execute(select(Prompt.text, Prompt.id)).all())


def test_disagreement_from_the_store_compares_the_ai_judges_only(sessions, tmp_path):
    abc = ["a", "b", "c"]
    ids = _import(
        sessions,
        tmp_path,
        [
            ranking_line("agreed", abc, [[0], [1], [2]], "judge-1", "ai"),
            ranking_line("agreed", abc, [[0], [1], [2]], "judge-2", "ai"),
            ranking_line("agreed", abc, [[2], [1], [0]], "alice", "human"),  # people's rankings are not judges'
            ranking_line("reversed", abc, [[0], [1], [2]], "judge-1", "ai"),
            ranking_line("reversed", abc, [[2], [1], [0]], "judge-2", "ai"),
            ranking_line("swapped", abc, [[0], [1], [2]], "judge-1", "ai"),
            ranking_line("swapped", abc, [[1], [0], [2]], "judge-2", "ai"),
            ranking_line("unjudged", abc, [[0], [1], [2]], "alice", "human"),
        ],
    )
    chosen = select_prompts(sessions, list(ids.values()), SelectConfig(select="disagreement"), 2)
    assert [c.prompt_id for c in chosen] == [ids["reversed"], ids["swapped"]]
    assert [round(c.score, 6) for c in chosen] == [1.0, round(1 / 3, 6)]
    assert chosen[0].record("disagreement") == {"strategy": "disagreement", "score": 1.0, "reason": chosen[0].reason}
    with pytest.raises(InputError, match="two AI rankings"):
        select_prompts(sessions, [ids["unjudged"]], SelectConfig(select="disagreement"), 2)


def test_disagreement_compares_rankings_of_one_criterion_only(sessions, tmp_path):
    """Two judges ranking a prompt by different criteria disagree on nothing: they answered different questions.
    A prompt ranked by two criteria scores as its most disputed one; `criterion` keeps one."""
    abc = ["a", "b", "c"]

    def line(prompt, tiers, judge, criterion):
        return ranking_line(prompt, abc, tiers, judge, "ai", criterion=criterion)

    ids = _import(
        sessions,
        tmp_path,
        [
            line("crossed", [[0], [1], [2]], "judge-1", "helpfulness"),
            line("crossed", [[2], [1], [0]], "judge-2", "harmlessness"),
            line("both", [[0], [1], [2]], "judge-1", "helpfulness"),
            line("both", [[0], [1], [2]], "judge-2", "helpfulness"),
            line("both", [[0], [1], [2]], "judge-1", "harmlessness"),
            line("both", [[2], [1], [0]], "judge-2", "harmlessness"),
        ],
    )
    with pytest.raises(InputError, match="two AI rankings of one criterion"):
        select_prompts(sessions, [ids["crossed"]], SelectConfig(select="disagreement"), 2)
    (chosen,) = select_prompts(sessions, list(ids.values()), SelectConfig(select="disagreement"), 2)
    assert (chosen.prompt_id, chosen.score) == (ids["both"], pytest.approx(1.0))
    assert chosen.reason == "2 rankings of harmlessness agree at mean Kendall tau-b -1.000"
    (helpful,) = select_prompts(
        sessions, list(ids.values()), SelectConfig(select="disagreement"), 2, criterion="helpfulness"
    )
    assert (helpful.prompt_id, helpful.score) == (ids["both"], pytest.approx(0.0))


def test_disagreement_of_rankings_by_criterion_is_each_criterions_own():
    by_criterion = {1: {"helpfulness": [[[1], [2]], [[1], [2]]], "harmlessness": [[[1], [2]], [[2], [1]]]}}
    (choice,) = pick_disagreement(by_criterion, 1)
    assert choice.score == pytest.approx(1.0) and "of harmlessness" in choice.reason
    # one list of rankings: one criterion, said as before
    (plain,) = pick_disagreement({1: by_criterion[1]["helpfulness"]}, 1)
    assert plain.score == pytest.approx(0.0) and plain.reason == "2 rankings agree at mean Kendall tau-b 1.000"


@pytest.fixture(scope="module")
def reward_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("rms")
    return [str(tiny_reward_model(root / f"rm{seed}", seed=seed)) for seed in (0, 1)]


TEXTS = [
    "The capital of France is Paris.",
    "A spider has eight legs.",
    "The sea is wide and blue.",
    "blue light scatters most",
    "good answer",
    "bad answer",
    "Score: 5",
    "I do not know.",
    "Paris",
    "eight",
    "The sky is blue because of scattering.",
    "question user assistant",
]


def _scores(path, prompt):
    from preflab.lm.loading import load_sequence_scorer
    from preflab.lm.scoring import reward_scores

    model, tokenizer = load_sequence_scorer(path, device="cpu")
    return dict(zip(TEXTS, reward_scores(model, tokenizer, [prompt] * len(TEXTS), TEXTS)))


def _store_pairs(sessions, tmp_path, chosen: dict[str, tuple[str, str]]) -> dict[str, int]:
    # The pairs go in as prompts with candidates (a ranking line stores both; who ranked them does not matter).
    return _import(
        sessions, tmp_path, [ranking_line(p, list(pair), [[0], [1]], "seed", "ai") for p, pair in chosen.items()]
    )


def test_uncertainty_from_the_store_picks_the_closest_reward_model_scores(sqlite_url, tmp_path, reward_models):
    from preflab.db.engine import open_database, session_factory

    sessions = session_factory(open_database(sqlite_url))
    close, far = "Which is right? ", "Tell me. "
    s_close, s_far = _scores(reward_models[0], close), _scores(reward_models[0], far)
    pairs = list(itertools.combinations(TEXTS, 2))
    nearest = min(pairs, key=lambda ab: abs(s_close[ab[0]] - s_close[ab[1]]))
    widest = max(pairs, key=lambda ab: abs(s_far[ab[0]] - s_far[ab[1]]))
    ids = _store_pairs(sessions, tmp_path, {close: nearest, far: widest})
    config = SelectConfig(select="uncertainty", reward_model=reward_models[0])
    chosen = select_prompts(sessions, list(ids.values()), config, 1)
    assert [c.prompt_id for c in chosen] == [ids[close]]
    gap = abs(s_close[nearest[0]] - s_close[nearest[1]])
    assert f"as small as {gap:.4f}" in chosen[0].reason


def test_uncertainty_from_an_ensemble_picks_where_the_reward_models_disagree(sqlite_url, tmp_path, reward_models):
    from preflab.db.engine import open_database, session_factory

    sessions = session_factory(open_database(sqlite_url))
    agreed, split = "Which is right? ", "Tell me. "
    a = [_scores(rm, agreed) for rm in reward_models]
    s = [_scores(rm, split) for rm in reward_models]

    def spread(scores, ab):
        return abs((scores[0][ab[0]] - scores[0][ab[1]]) - (scores[1][ab[0]] - scores[1][ab[1]]))

    pairs = list(itertools.combinations(TEXTS, 2))
    ids = _store_pairs(
        sessions,
        tmp_path,
        {agreed: min(pairs, key=lambda ab: spread(a, ab)), split: max(pairs, key=lambda ab: spread(s, ab))},
    )
    config = SelectConfig(select="uncertainty", reward_model=",".join(reward_models))
    chosen = select_prompts(sessions, list(ids.values()), config, 2)
    assert [c.prompt_id for c in chosen] == [ids[split], ids[agreed]]
    assert chosen[0].score == pytest.approx(max(spread(s, ab) for ab in pairs) / math.sqrt(2), rel=1e-4)


def test_last_layer_features_are_what_the_scoring_head_reads(reward_models):
    import torch

    from preflab.lm.loading import load_sequence_scorer
    from preflab.lm.scoring import reward_scores

    model, tokenizer = load_sequence_scorer(reward_models[0], device="cpu")
    prompts = ["Q: "] * len(TEXTS)
    features = torch.tensor(last_layer_features(model, tokenizer, prompts, TEXTS, batch_size=5))
    assert features.shape == (len(TEXTS), model.config.hidden_size)
    with torch.no_grad():
        from_head = model.score(features)[:, 0].tolist()
    assert from_head == pytest.approx(reward_scores(model, tokenizer, prompts, TEXTS), abs=1e-5)


def test_diversity_from_the_store_starts_from_what_people_ranked(sqlite_url, tmp_path, reward_models):
    from preflab.db.engine import open_database, session_factory
    from preflab.lm.loading import load_sequence_scorer
    from preflab.lm.scoring import reward_scores

    sessions = session_factory(open_database(sqlite_url))
    prompts = [f"prompt {n}: " for n in range(6)]
    lines = [ranking_line(p, TEXTS[2 * n : 2 * n + 2], [[0], [1]], "seed", "ai") for n, p in enumerate(prompts)]
    lines.append(ranking_line(prompts[0], TEXTS[0:2], [[1], [0]], "alice", "human"))  # people ranked prompt 0
    ids = _import(sessions, tmp_path, lines)
    config = SelectConfig(select="diversity", reward_model=reward_models[0])
    chosen = select_prompts(sessions, [ids[p] for p in prompts[1:]], config, 5)
    assert sorted(c.prompt_id for c in chosen) == sorted(ids[p] for p in prompts[1:])
    # The same greedy on features taken here, with prompt 0 as what people already ranked.
    model, tokenizer = load_sequence_scorer(reward_models[0], device="cpu")
    feats, scores = {}, {}
    for n, p in enumerate(prompts):
        pair = TEXTS[2 * n : 2 * n + 2]
        feats[ids[p]] = np.array(last_layer_features(model, tokenizer, [p, p], pair))
        scores[ids[p]] = reward_scores(model, tokenizer, [p, p], pair)
    expected = pick_diversity(
        {ids[p]: feats[ids[p]] for p in prompts[1:]},
        5,
        scores=scores,
        labelled={ids[prompts[0]]: feats[ids[prompts[0]]]},
    )
    assert [c.prompt_id for c in chosen] == [c.prompt_id for c in expected]
    assert [c.score for c in chosen] == pytest.approx([c.score for c in expected], rel=1e-4)
