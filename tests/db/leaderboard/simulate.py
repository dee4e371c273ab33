"""Battles simulated from known strengths: the truth the leaderboard must recover.

Each battle is a tie with its annotator's tie rate, else a win drawn so that the
expected score of a (wins plus half the ties) is exactly Bradley–Terry's
1 / (1 + 10^((s_b − s_a) / 400)): the model the leaderboard fits holds, whatever the
tie rate, so its ratings estimate the strengths themselves.
"""

from __future__ import annotations

# One copy of the simulation, in bench/ (the leaderboard bench draws the same battles; benches never import tests/).
from bench.worlds import TIE_RATES, simulate, winners

__all__ = ["TIE_RATES", "simulate", "winners"]
