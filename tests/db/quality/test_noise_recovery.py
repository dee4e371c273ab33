"""Agreement recovers the noise planted in simulated annotators, on SQLite and on Postgres.

Every prompt has two replies, the first better. A person flips each pair with
probability EPSILON, the judge with JUDGE_EPSILON, each independently. Then:

- two people agree on a pair with probability (1 − ε)² + ε²;
- a person agrees with the truth (the gold answer) with probability 1 − ε;
- the judge agrees with a person with probability (1 − ε)(1 − ε_j) + ε·ε_j;
- on two-reply rankings tau-b is ±1, so the mean tau-b is exactly 2·agreement − 1.

The seeds are fixed, so each check either always holds or never does; the
tolerances are about four standard errors of these sizes, so they are not a
coincidence of one seed either. The judge's bootstrap interval is checked against
scipy's percentile bootstrap over the same prompts.
"""

from __future__ import annotations

import json
import math
import random
from itertools import combinations

import numpy as np
import pytest
from scipy.stats import bootstrap
from sqlalchemy import select

from preflab.db.models import Annotator
from preflab.db.quality.gold import read_gold, store_gold
from tests.db.helpers import ranking_line, write_lines

PROMPTS = 300
PEOPLE = ("ann", "bea", "cid")
EPSILON = 0.2
JUDGE_EPSILON = 0.1


def near(share: float, truth: float, pairs: int) -> bool:
    """Within four standard errors of a share of `pairs` independent pairs."""
    return abs(share - truth) <= 4 * math.sqrt(truth * (1 - truth) / pairs)


def _vote(rng: random.Random, epsilon: float) -> list[list[int]]:
    return [[1], [0]] if rng.random() < epsilon else [[0], [1]]


@pytest.fixture
def noisy_store(cli, sessions, tmp_path):
    """The store, and each annotator's votes (True: ordered as the truth) by prompt, as drawn."""
    rng = random.Random(46)
    lines, gold, right = [], [], {who: [] for who in (*PEOPLE, "judge")}
    for p in range(PROMPTS):
        prompt, replies = f"Question {p}: which answer is right?", [f"right answer {p}", f"wrong answer {p}"]
        for who in (*PEOPLE, "judge"):
            vote = _vote(rng, JUDGE_EPSILON if who == "judge" else EPSILON)
            right[who].append(vote == [[0], [1]])
            kind = "ai" if who == "judge" else "human"
            lines.append(ranking_line(prompt, replies, vote, who, kind, id=f"{p}-{who}"))
        gold.append(json.dumps({"prompt": prompt, "responses": replies, "ranking": [[0], [1]]}))
    cli("import", "rankings", write_lines(tmp_path / "noisy.jsonl", lines))
    with sessions.begin() as s:
        store_gold(s, read_gold(write_lines(tmp_path / "gold.jsonl", gold)))
    return sessions, right


def alike(first: list[bool], second: list[bool]) -> float:
    """The share of prompts two annotators' votes order alike: a direct count."""
    return sum(a == b for a, b in zip(first, second)) / len(first)


def test_agreement_recovers_the_planted_noise_and_the_judges_interval_is_scipys(cli, noisy_store):
    _, right = noisy_store
    agreement = json.loads(cli("stats", "--json").stdout)["agreement"]["overall"]
    people, mixed = agreement["human-human"], agreement["human-ai"]
    assert people["shared_pairs"] == PROMPTS * 3 and mixed["shared_pairs"] == PROMPTS * 3
    # Exactly the votes as drawn, counted directly…
    drawn = sum(alike(right[a], right[b]) for a, b in combinations(PEOPLE, 2)) / 3
    assert people["pairwise_agreement"] == pytest.approx(drawn, abs=1e-12)
    drawn_mixed = sum(alike(right[a], right["judge"]) for a in PEOPLE) / 3
    assert mixed["pairwise_agreement"] == pytest.approx(drawn_mixed, abs=1e-12)
    # …and the noise planted in them.
    assert near(people["pairwise_agreement"], (1 - EPSILON) ** 2 + EPSILON**2, 3 * PROMPTS)
    truth = (1 - EPSILON) * (1 - JUDGE_EPSILON) + EPSILON * JUDGE_EPSILON
    assert near(mixed["pairwise_agreement"], truth, 3 * PROMPTS)
    for row in (people, mixed):
        assert row["kendall_tau"] == pytest.approx(2 * row["pairwise_agreement"] - 1, abs=1e-12)

    rows = json.loads(cli("annotators", "--json").stdout)["annotators"]
    assert len(rows) == len(PEOPLE)
    with noisy_store[0]() as s:
        names = dict(s.execute(select(Annotator.pseudonym, Annotator.name)).all())
    for row in rows:
        assert row["gold_rankings"] == PROMPTS
        votes = right[names[row["annotator"]]]
        assert row["gold_pairwise"] == pytest.approx(sum(votes) / PROMPTS, abs=1e-12)
        assert near(row["gold_pairwise"], 1 - EPSILON, PROMPTS)
        assert row["gold_tau"] == pytest.approx(2 * row["gold_pairwise"] - 1, abs=1e-12)

    # The judge's bootstrap interval holds the truth, and is scipy's percentile bootstrap over the prompts.
    [row] = json.loads(cli("stats", "--judges", "--json").stdout)["judges"]
    truth = (1 - EPSILON) * (1 - JUDGE_EPSILON) + EPSILON * JUDGE_EPSILON
    assert row["shared_prompts"] == PROMPTS and row["shared_pairs"] == PROMPTS * len(PEOPLE)
    assert row["agreement_low"] < truth < row["agreement_high"]
    assert near(row["agreement"], truth, 3 * PROMPTS)

    # The same interval from scipy: each prompt's agreeing pairs out of its three, prompts resampled.
    from preflab.labelling.judges.report import judge_report

    sessions, _ = noisy_store
    with sessions() as s:
        judge = s.scalar(select(Annotator.id).where(Annotator.name == "judge"))
        [report] = judge_report(s, [judge], per_prompt=True, imported=True)
    counts = np.array(report["human_agreement"]["per_prompt"], dtype=float)
    assert counts.shape == (PROMPTS, 2) and counts[:, 1].sum() / counts[:, 0].sum() == row["agreement"]
    theirs = bootstrap(
        (counts[:, 0], counts[:, 1]),
        lambda shared, agreeing, axis=-1: agreeing.sum(axis=axis) / shared.sum(axis=axis),
        paired=True,
        vectorized=True,
        n_resamples=5_000,
        method="percentile",
        random_state=np.random.default_rng(0),
    ).confidence_interval
    width = theirs.high - theirs.low
    assert row["agreement_low"] == pytest.approx(theirs.low, abs=0.1 * width)
    assert row["agreement_high"] == pytest.approx(theirs.high, abs=0.1 * width)
