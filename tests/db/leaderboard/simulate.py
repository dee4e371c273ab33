"""Battles simulated from known strengths: the truth the leaderboard must recover.

Each battle is a tie with its annotator's tie rate, else a win drawn so that the
expected score of a (wins plus half the ties) is exactly Bradley–Terry's
1 / (1 + 10^((s_b − s_a) / 400)): the model the leaderboard fits holds, whatever the
tie rate, so its ratings estimate the strengths themselves.
"""

from __future__ import annotations

import numpy as np

TIE_RATES = (0.03, 0.08, 0.15)  # one per annotator: several annotators, some tie more


def simulate(strengths, n_battles: int, rng: np.random.Generator, tie_rates=TIE_RATES):
    """(a, b, outcome, annotator): model indices, a's result (1, 0.5, 0) and who judged, per battle."""
    strengths = np.asarray(strengths, dtype=np.float64)
    n = len(strengths)
    a = rng.integers(0, n, n_battles)
    b = (a + rng.integers(1, n, n_battles)) % n
    annotator = rng.integers(0, len(tie_rates), n_battles)
    tie = np.asarray(tie_rates)[annotator]
    p = 1.0 / (1.0 + 10.0 ** ((strengths[b] - strengths[a]) / 400.0))
    win = (p - tie / 2) / (1 - tie)  # P(a wins | no tie); needs tie/2 <= p <= 1 - tie/2
    assert (win >= 0).all() and (win <= 1).all(), "a tie rate too high for these strengths"
    outcome = np.where(rng.random(n_battles) < tie, 0.5, (rng.random(n_battles) < win).astype(np.float64))
    return a, b, outcome, annotator


def winners(outcome, rng: np.random.Generator | None = None) -> list[str]:
    """Chatbot Arena's `winner` column for outcomes; ties split between its two kinds."""
    ties = ("tie", "tie (bothbad)")
    draw = rng.integers(0, 2, len(outcome)) if rng is not None else np.zeros(len(outcome), dtype=int)
    return ["model_a" if o == 1.0 else "model_b" if o == 0.0 else ties[d] for o, d in zip(outcome, draw)]
