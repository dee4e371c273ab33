"""The leaderboard agrees with arena-rank 0.1.1 (LMArena's own package) on dense battles, to half a point.

arena-rank runs in its own environment (`make arena-venv`: its numpy and jax pins must not
enter ours), through `arena_rank_script.py`: battles in as JSON, ratings out, one process for
every board here (jax takes seconds to start). On sparse battles they differ by design, and
this test pins how (docs/guides/leaderboard.md): a newcomer that lost its 3 battles has no
finite maximum-likelihood rating, so arena-rank, with no penalty, sends it hundreds of points
down and moves every other model's rating with it; preflab gives it an open interval and
leaves the others where they were.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from preflab.db.leaderboard.battles import from_labels
from preflab.db.leaderboard.board import LeaderboardConfig, rate
from tests.db.leaderboard.simulate import simulate, winners

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

SCRIPT = Path(__file__).with_name("arena_rank_script.py")
PYTHON = os.environ.get("PREFLAB_ARENA_PYTHON", str(Path.home() / ".cache/arena-venv/bin/python"))


def dense(seed: int, n: int = 900) -> dict[str, list[str]]:
    """Battles among 6 models (named out of order) with Arena's winners, ties of both kinds."""
    rng = np.random.default_rng(seed)
    names = np.array([f"model-{k}" for k in (4, 1, 5, 0, 3, 2)])
    a, b, outcome, _ = simulate(np.linspace(-200, 200, 6), n, rng)
    won = [w.replace("tie (bothbad)", "both_bad") for w in winners(outcome, rng)]
    return {"model_a": names[a].tolist(), "model_b": names[b].tolist(), "winner": won}


def with_newcomer(board: dict[str, list[str]]) -> dict[str, list[str]]:
    """The same battles and a newcomer that lost 3 battles to the weakest model."""
    return {
        "model_a": board["model_a"] + ["newcomer"] * 3,
        "model_b": board["model_b"] + ["model-0"] * 3,
        "winner": board["winner"] + ["model_b"] * 3,
    }


@pytest.fixture(scope="module")
def boards():
    """(the boards, arena-rank's ratings of each), arena-rank run once for all of them."""
    if not Path(PYTHON).exists():
        pytest.fail(f"arena-rank's interpreter {PYTHON} does not exist: run `make arena-venv`", pytrace=False)
    ours = [dense(2), with_newcomer(dense(2))]  # two boards: jax compiles its fit anew for each, seconds apiece
    done = subprocess.run(
        [PYTHON, str(SCRIPT)], input=json.dumps(ours), capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return ours, json.loads(done.stdout)


def preflab_ratings(board: dict[str, list[str]]) -> dict[str, float]:
    battles = from_labels(board["model_a"], board["model_b"], [w.replace("both_bad", "tie") for w in board["winner"]])
    return {r.model: r.rating for r in rate(battles, LeaderboardConfig(bootstrap=0)).ratings}


def test_ratings_agree_with_arena_rank_to_half_a_point_on_dense_battles(boards):
    ours, theirs = boards
    board, result = ours[0], theirs[0]
    mine = preflab_ratings(board)
    assert set(mine) == set(result["models"])
    for model, rating in zip(result["models"], result["ratings"]):
        assert mine[model] == pytest.approx(rating, abs=0.5), model
    assert np.mean(result["ratings"]) == pytest.approx(1000.0, abs=1e-6)  # both: the plain mean, every model dense


def test_a_newcomer_of_three_losses_moves_arena_ranks_board_and_not_preflabs(boards):
    ours, theirs = boards
    before = dict(zip(theirs[0]["models"], theirs[0]["ratings"]))
    after = dict(zip(theirs[1]["models"], theirs[1]["ratings"]))
    mine_before, mine_after = preflab_ratings(ours[0]), preflab_ratings(ours[1])
    shift = [after[m] - before[m] for m in before]
    mine = [mine_after[m] - mine_before[m] for m in mine_before]
    assert min(shift) > 100  # every other model lifted by the newcomer's fall
    assert max(map(abs, mine)) < 15  # the newcomer weighs 3 against 50 for each of the six
    newcomer = theirs[1]["models"].index("newcomer")
    assert after["newcomer"] < mine_after["newcomer"] - 500  # no penalty: far below
    assert theirs[1]["upper"][newcomer] - theirs[1]["lower"][newcomer] < 1.0  # and a sandwich interval of no width
