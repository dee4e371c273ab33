"""The laws through a real store (SQLite and Postgres): what the board reads is what the battles say.

The same battles imported again with every model renamed and each ranking's replies listed
the other way round give the same board. Renamed in an order-keeping way (every name prefixed), the
intervals are the same to the last digit: the store's battles are numbered by model name and turned by
it, so a bootstrap's draws follow neither the file's order nor the store's. Renamed in another order,
the ratings, records and ranks are the same and the intervals differ only by the bootstrap's own
Monte Carlo error (the same draws fall on other battles).
"""

from __future__ import annotations

import numpy as np
import pytest

from preflab.db.leaderboard.board import LeaderboardConfig, leaderboard
from tests.db.helpers import ranking_line
from tests.db.leaderboard.simulate import simulate
from tests.db.leaderboard.store import import_lines

MODELS = ["ultra", "large", "mid", "small", "tiny"]
REVERSED = {m: f"model {k}" for k, m in enumerate(reversed(MODELS))}  # the names' order turned round
PREFIXED = {m: f"model {m}" for m in MODELS}  # the same order


def games(seed: int = 0, n: int = 120) -> list[tuple[str, str, float]]:
    """Five models 80 Elo apart, and a newcomer that lost its 3 battles."""
    rng = np.random.default_rng(seed)
    a, b, outcome, _ = simulate([320.0, 240.0, 160.0, 80.0, 0.0], n, rng)
    return [(MODELS[x], MODELS[y], float(o)) for x, y, o in zip(a, b, outcome)] + [("newbie", "tiny", 0.0)] * 3


def lines(battles, *, renamed: dict[str, str] | None = None) -> list[str]:
    out = []
    for k, (x, y, o) in enumerate(battles):
        replies, models = [f"reply {k} by {x}", f"reply {k} by {y}"], [x, y]
        tiers = [[0], [1]] if o == 1 else [[1], [0]] if o == 0 else [[0, 1]]
        if renamed:  # the other model first, the verdict turned with it
            replies, models = replies[::-1], [renamed.get(m, "model newbie") for m in models[::-1]]
            tiers = [[1 - i for i in tier] for tier in tiers]
        out.append(ranking_line(f"question {k}", replies, tiers, model=models, id=f"{'b' if renamed else 'a'}{k}"))
    return out


def boards(sessions, tmp_path, renamed: dict[str, str]):
    battles = games()
    import_lines(sessions, tmp_path / "a.jsonl", lines(battles))
    import_lines(sessions, tmp_path / "b.jsonl", lines(battles, renamed=renamed), source="import:arena")
    with sessions.begin() as session:
        plain = leaderboard(session, LeaderboardConfig(source="import", bootstrap=200))
        other = leaderboard(session, LeaderboardConfig(source="import:arena", bootstrap=200))
    names = {**renamed, "newbie": "model newbie"}
    assert [names[r.model] for r in plain.ratings] == [r.model for r in other.ratings]
    newbie = plain.ratings[-1]
    assert (newbie.model, newbie.rank, newbie.interval, newbie.lower) == ("newbie", None, "exact", None)
    assert [r.rank for r in plain.ratings[:5]] == sorted(r.rank for r in plain.ratings[:5])
    return plain, other


def test_renamed_models_and_swapped_sides_give_the_same_board(sessions, tmp_path):
    plain, other = boards(sessions, tmp_path, PREFIXED)
    for r, s in zip(plain.ratings, other.ratings, strict=True):
        assert {**vars(s), "model": r.model} == vars(r)


def test_models_renamed_in_another_order_keep_their_ratings(sessions, tmp_path):
    plain, other = boards(sessions, tmp_path, REVERSED)
    same = ("rank", "battles", "wins", "ties", "losses", "group", "few_battles", "interval")
    for r, s in zip(plain.ratings, other.ratings, strict=True):
        assert {k: getattr(s, k) for k in same} == {k: getattr(r, k) for k in same}
        assert s.rating == pytest.approx(r.rating, abs=1e-9)  # the same fit, summed in another order
        if r.interval == "exact":  # no draws: the same to the digit
            assert (s.lower, s.upper) == (r.lower, r.upper)
        else:  # 200 rounds: each end within a third of the interval's width
            width = r.upper - r.lower
            assert abs(s.lower - r.lower) < width / 3 and abs(s.upper - r.upper) < width / 3, (r, s)


def test_the_same_battles_stored_in_another_order_give_the_same_intervals(sessions, tmp_path):
    """The order rankings were stored in changes their ids, which models are met first and which reply
    is stored first: none of it reaches the board, the bootstrap's draws included."""
    plain = lines(games())
    shuffled = [plain[k].replace('"id": "a', '"id": "s') for k in np.random.default_rng(3).permutation(len(plain))]
    import_lines(sessions, tmp_path / "a.jsonl", plain)
    import_lines(sessions, tmp_path / "s.jsonl", shuffled[::-1], source="import:arena")
    with sessions.begin() as session:
        first, second = (
            leaderboard(session, LeaderboardConfig(source=s, bootstrap=200)) for s in ("import", "import:arena")
        )
    assert [vars(r) for r in first.ratings] == [vars(r) for r in second.ratings]
