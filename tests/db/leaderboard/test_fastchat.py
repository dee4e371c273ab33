"""The leaderboard agrees with Chatbot Arena's own computation (FastChat) on the same battles.

FastChat's formulas are written out in `fastchat_reference.py` (the fschat wheel does not
hold them and needs packages preflab does not install). Same battles, same seed: the
ratings, the bootstrap's quantiles (its draws are the same draws) and the
style-controlled ratings agree to well within one Elo point.
"""

import numpy as np
import pandas as pd
import pytest

from preflab.db.leaderboard.battles import from_labels, style_features
from preflab.db.leaderboard.board import LeaderboardConfig, rate
from tests.db.leaderboard import fastchat_reference as fastchat
from tests.db.leaderboard.simulate import simulate, winners

ROUNDS = 200


@pytest.fixture(scope="module")
def arena():
    """4,000 battles of 8 models (named out of order, so FastChat numbers them by appearance), with style counts."""
    rng = np.random.default_rng(7)
    names = np.array([f"model-{k}" for k in (5, 2, 7, 0, 3, 6, 1, 4)])
    a, b, outcome, _ = simulate(np.linspace(-190, 190, 8), 4000, rng)
    style = np.stack(
        [
            rng.integers(20, 900, (4000, 2)),
            rng.integers(0, 6, (4000, 2)),
            rng.integers(0, 12, (4000, 2)),
            rng.integers(0, 8, (4000, 2)),
        ],
        axis=2,
    )
    df = pd.DataFrame({"model_a": names[a], "model_b": names[b], "winner": winners(outcome, rng)})
    return df, style


def test_ratings_and_intervals_agree_with_fastchat_within_one_elo(arena):
    df, _ = arena
    board = rate(from_labels(df.model_a, df.model_b, df.winner), LeaderboardConfig(bootstrap=ROUNDS))
    theirs = fastchat.compute_bt(df)
    samples = fastchat.compute_bootstrap_bt(df, ROUNDS)
    ours = {r.model: r for r in board.ratings}
    assert set(ours) == set(theirs.index)
    for model, rating in theirs.items():
        assert ours[model].rating == pytest.approx(rating, abs=1.0)
        lower, median, upper = samples[model].quantile([0.025, 0.5, 0.975])
        assert (ours[model].lower, ours[model].median, ours[model].upper) == pytest.approx(
            (lower, median, upper), abs=1.0
        )
    # ordered by the bootstrap median, as FastChat orders its bootstrap table
    assert [r.model for r in board.ratings] == list(samples.columns)
    assert np.mean([r.rating for r in board.ratings]) == pytest.approx(1000.0, abs=1e-6)


def test_style_control_agrees_with_fastchat_within_one_elo(arena):
    df, style = arena
    battles = from_labels(df.model_a, df.model_b, df.winner)
    board = rate(battles, LeaderboardConfig(bootstrap=0, style_control=True), style=style.astype(float))
    theirs, coefficients = fastchat.compute_style_control(df, style[:, 0, :], style[:, 1, :])
    ours = {r.model: r.rating for r in board.style}
    for model, rating in theirs.items():
        assert ours[model] == pytest.approx(rating, abs=1.0)
    assert list(board.style_coefficients.values()) == pytest.approx(list(coefficients), abs=1e-3)
    _, features, _, _ = fastchat.preprocess_for_style(df, style[:, 0, :], style[:, 1, :])
    assert np.allclose(style_features(style.astype(float))[0], features)


def test_the_bootstrap_draws_are_fastchats_draws(arena):
    """Same seed, same battles: the multinomial draws are the same, so FastChat's samples are ours."""
    from preflab.db.leaderboard.bootstrap import Cells, patterns

    df, _ = arena
    battles = from_labels(df.model_a, df.model_b, df.winner)
    counts, incidence = patterns(battles, Cells(battles))
    _, _, _, weights = fastchat.preprocess_for_bt(df)
    assert counts.tolist() == weights.tolist()
    assert incidence.shape[0] == len(weights)
