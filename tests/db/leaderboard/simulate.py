"""Battles simulated from known strengths: the truth the leaderboard must recover.

Each battle is a tie with its annotator's tie rate, else a win drawn so that the
expected score of a (wins plus half the ties) is exactly Bradley–Terry's
1 / (1 + 10^((s_b − s_a) / 400)): the model the leaderboard fits holds, whatever the
tie rate, so its ratings estimate the strengths themselves.
"""

from __future__ import annotations

import numpy as np

# One copy of the simulation, in bench/ (the leaderboard bench draws the same battles; benches never import tests/).
from bench.worlds import TIE_RATES, simulate, winners
from preflab.db.leaderboard.fit import SCALE, centre, centre_weights, to_elo

__all__ = ["TIE_RATES", "newcomer", "simulate", "true_ratings", "winners"]


def newcomer(strength: float, opponents: np.ndarray, rng: np.random.Generator, tie_rate: float = 0.1) -> np.ndarray:
    """The newcomer's result (1, 0.5, 0) in one battle against each of `opponents` (their strengths), as `simulate`."""
    p = 1.0 / (1.0 + 10.0 ** ((np.asarray(opponents, dtype=np.float64) - strength) / 400.0))
    win = (p - tie_rate / 2) / (1 - tie_rate)
    assert (win >= 0).all() and (win <= 1).all(), "a tie rate too high for these strengths"
    return np.where(rng.random(len(p)) < tie_rate, 0.5, (rng.random(len(p)) < win).astype(np.float64))


def true_ratings(strengths: np.ndarray, played: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
    """What the board's ratings estimate: the strengths centred by the board's convention (`fit.centre`), Elo scale.

    The centre is a convention, not an estimate: the weights come from the battles played.
    """
    groups = np.zeros(len(strengths), dtype=np.int64) if groups is None else groups
    natural = np.asarray(strengths, dtype=np.float64) / SCALE
    return to_elo(centre(natural, groups, centre_weights(played, groups)))
