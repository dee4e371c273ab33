"""What a leaderboard says in words: how it was made (`described`) and what a reader must know (`notes`).

`board.rate` computes; this module words it: the method's conventions (the scale, the centre, the
bootstrap, the exact intervals of models of few battles) and the notes printed under the table
(groups that never met, ratings held finite by the penalty, models not ranked and why).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from preflab.db.leaderboard.battles import Battles
from preflab.db.leaderboard.exact import FEW_BATTLES, HELD_SHARE, record
from preflab.db.leaderboard.fit import ALPHA, CENTRE_CAP, L2, OFFSET, SCALE

TIES = "a tie is half a win to each side"


def described(anchor: str | None, bootstrap: int, seed: int) -> dict[str, Any]:
    """How the board was made, as `Leaderboard.method` holds it (--json, the report)."""
    return {
        "model": "Bradley–Terry (maximum likelihood, FastChat's conventions)",
        "base": 10,
        "alpha": ALPHA,
        "scale": SCALE,
        "offset": OFFSET,
        "anchor": anchor or "mean",
        "centre": f"each group's weighted mean at {OFFSET:.0f}, a model weighing min(its rankings, K) (one per "
        f"battle where a ranking is one battle), K its group's centre_cap: {CENTRE_CAP}, or a tenth of the group's "
        "median rankings per model where that is more",
        "ties": TIES,
        "l2": L2,
        "bootstrap": bootstrap,
        "seed": seed,
        "bootstrap_unit": "ranking",
        "interval": "95%: the 2.5% and 97.5% quantiles of the bootstrap ratings, of the rounds holding the model",
        "few_battles": f"under {FEW_BATTLES} battles or rankings, all lost or all won, or held by under "
        f"{HELD_SHARE:.0%} of the "
        "bootstrap rounds: an exact test's 95% interval (the score's Poisson-binomial law against the opponents' "
        "ratings; no end where no rating is rejected), and no rank",
        "order": "group, then rank, then "
        + ("bootstrap median" if bootstrap else "rating")
        + "; models of few battles last in their group, by rating",
    }


def notes(battles: Battles, groups: np.ndarray, ratings: Sequence[Any]) -> list[str]:
    """What a reader must know to read the ratings: models that never met, ratings held finite by the penalty."""
    notes = []
    if groups.max() > 0:
        listed = [
            f"group {k}: " + ", ".join(r.model for r in ratings if r.group == k)
            for k in range(1, int(groups.max()) + 2)
        ]
        notes.append(
            "these groups of models never met, directly or through others, so ratings and ranks compare "
            "only within a group: " + " | ".join(listed)
        )
    _played, wins, ties, losses = record(battles)
    for name, w, t, lost in zip(battles.models, wins, ties, losses):
        if w + t == 0 or lost + t == 0:
            notes.append(
                f"{name} {'lost' if w + t == 0 else 'won'} every battle: its rating is held finite only "
                f"by the fit's small L2 penalty, and more battles will move it"
            )
    few = [f"{r.model} ({r.few_battles})" for r in ratings if r.few_battles]
    if few:
        notes.append(
            "not ranked, for too few battles, and no say in the others' ranks (listed after their group's ranked "
            "models): "
            + ", ".join(few)
            + (
                "; their 95% interval is an exact test's (the score against the opponents' ratings; "
                "−∞ or ∞ where no rating is rejected), the bootstrap's being too narrow there"
                if ratings[0].interval
                else ""
            )
        )
    return notes
