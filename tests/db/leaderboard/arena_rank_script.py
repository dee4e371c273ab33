"""arena-rank 0.1.1's Bradley–Terry ratings of battles, run by its own interpreter (`make arena-venv`).

arena-rank (LMArena's package) pins numpy 2.3.3 and jax 0.8.1, which must not enter preflab's
environment, so tests/db/leaderboard/test_arena_rank.py runs this file with
~/.cache/arena-venv/bin/python (PREFLAB_ARENA_PYTHON). It imports nothing of preflab.

stdin: a JSON list of boards, each {"model_a": [...], "model_b": [...], "winner": [...]} with
Chatbot Arena's winners (model_a, model_b, tie, both_bad). stdout: a JSON list, per board
{"models": [...], "ratings": [...], "lower": [...], "upper": [...]}: arena-rank's own defaults
(scale 400, base 10, 1000 at the mean, its sandwich 95% intervals).
"""

import json
import sys

import pandas as pd
from arena_rank.models.bradley_terry import BradleyTerry
from arena_rank.utils.data_utils import PairDataset


def rate(board: dict) -> dict:
    dataset = PairDataset.from_pandas(pd.DataFrame(board))
    model = BradleyTerry(n_competitors=len(dataset.competitors))
    result = model.compute_ratings_and_cis(dataset)
    return {
        "models": list(result["competitors"]),
        "ratings": [float(x) for x in result["ratings"]],
        "lower": [float(x) for x in result["rating_lower"]],
        "upper": [float(x) for x in result["rating_upper"]],
    }


if __name__ == "__main__":
    json.dump([rate(board) for board in json.load(sys.stdin)], sys.stdout)
