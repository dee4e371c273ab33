"""The laws through a real store (SQLite and Postgres): what the board reads is what the battles say.

The same battles imported again with every model renamed and each ranking's replies listed
the other way round give the same board, intervals and all: the store keeps one candidate per
reply, and the battles are read in the store's order, not the file's.
"""

from __future__ import annotations

import numpy as np

from preflab.db.leaderboard.board import LeaderboardConfig, leaderboard
from tests.db.helpers import ranking_line
from tests.db.leaderboard.simulate import simulate
from tests.db.leaderboard.store import import_lines

MODELS = ["ultra", "large", "mid", "small", "tiny"]
RENAMED = {m: f"model {k}" for k, m in enumerate(reversed(MODELS))}


def games(seed: int = 0, n: int = 120) -> list[tuple[str, str, float]]:
    """Five models 80 Elo apart, and a newcomer that lost its 3 battles."""
    rng = np.random.default_rng(seed)
    a, b, outcome, _ = simulate([320.0, 240.0, 160.0, 80.0, 0.0], n, rng)
    return [(MODELS[x], MODELS[y], float(o)) for x, y, o in zip(a, b, outcome)] + [("newbie", "tiny", 0.0)] * 3


def lines(battles, *, renamed: bool) -> list[str]:
    out = []
    for k, (x, y, o) in enumerate(battles):
        replies, models = [f"reply {k} by {x}", f"reply {k} by {y}"], [x, y]
        tiers = [[0], [1]] if o == 1 else [[1], [0]] if o == 0 else [[0, 1]]
        if renamed:  # the other model first, the verdict turned with it
            replies, models = replies[::-1], [RENAMED.get(m, "newbie 2") for m in models[::-1]]
            tiers = [[1 - i for i in tier] for tier in tiers]
        out.append(ranking_line(f"question {k}", replies, tiers, model=models, id=f"{'b' if renamed else 'a'}{k}"))
    return out


def test_renamed_models_and_swapped_sides_give_the_same_board(sessions, tmp_path):
    battles = games()
    import_lines(sessions, tmp_path / "a.jsonl", lines(battles, renamed=False))
    import_lines(sessions, tmp_path / "b.jsonl", lines(battles, renamed=True), source="import:arena")
    with sessions.begin() as session:
        plain = leaderboard(session, LeaderboardConfig(source="import", bootstrap=200))
        other = leaderboard(session, LeaderboardConfig(source="import:arena", bootstrap=200))
    names = {**RENAMED, "newbie": "newbie 2"}
    assert [names[r.model] for r in plain.ratings] == [r.model for r in other.ratings]
    for r, s in zip(plain.ratings, other.ratings, strict=True):
        assert {**vars(s), "model": r.model} == vars(r)
    newbie = plain.ratings[-1]
    assert (newbie.model, newbie.rank, newbie.interval, newbie.lower) == ("newbie", None, "exact", None)
    assert [r.rank for r in plain.ratings[:5]] == sorted(r.rank for r in plain.ratings[:5])
