"""The pairwise tables of `preflab leaderboard --pairwise`: what the data says about each pair of models.

For every pair: the battles between them, the observed win rate (a tie half a win), the
win probability the ratings predict, and the share of bootstrap rounds rating one above
the other (of the rounds holding both).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import expit

from preflab.db.leaderboard.battles import Battles
from preflab.db.leaderboard.bootstrap import share_better
from preflab.db.leaderboard.fit import ALPHA


def pairwise_tables(
    battles: Battles, board_order: list[str], point: np.ndarray, samples: np.ndarray | None
) -> dict[str, Any]:
    """Every pair, in board order: battles, the observed win rate (ties half), the predicted win probability.

    Args:
        point: the fit's ratings (natural units), for the predicted probabilities.
        samples: the bootstrap's centred ratings (natural units; NaN where a round does not hold a
            model), for the share of rounds rating one model above another; None without a bootstrap.
    """
    index = {m: k for k, m in enumerate(battles.models)}
    order = [index[m] for m in board_order]
    n = len(battles.models)
    played = np.zeros((n, n))
    scored = np.zeros((n, n))
    np.add.at(played, (battles.a, battles.b), 1.0)
    np.add.at(scored, (battles.a, battles.b), battles.outcome)
    played, scored = played + played.T, scored + (played.T - scored.T)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(played > 0, scored / played, np.nan)
    predicted = expit(ALPHA * (point[:, None] - point[None, :]))
    better = share_better(samples) if samples is not None else None

    def matrix(values: np.ndarray | None, digits: int = 4) -> list[list[float | None]] | None:
        if values is None:
            return None
        return [
            [None if i == j or np.isnan(values[i, j]) else round(float(values[i, j]), digits) for j in order]
            for i in order
        ]

    return {
        "models": [battles.models[i] for i in order],
        "battles": [[int(played[i, j]) for j in order] for i in order],
        "win_rate": matrix(rate),
        "predicted": matrix(predicted),
        "share_better": matrix(better),
    }
