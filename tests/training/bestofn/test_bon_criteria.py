"""Best-of-n's values from the store are one criterion's: the human reference never mixes two orders
(SQLite and Postgres)."""

from __future__ import annotations

import numpy as np
import pytest

from preflab.errors import NotFound
from preflab.training.bestofn.sources import db_groups
from tests.db.helpers import ranking_line, write_lines

PROMPTS = 3
SCORES = [3.0, 2.0, 1.0, 0.0]  # the judge's, the same in both criteria


def _lines(criteria_of_people: dict[str, list[list[int]]]) -> list[str]:
    lines = []
    for p in range(PROMPTS):
        replies = [f"reply {i} to {p}" for i in range(len(SCORES))]
        for criterion, tiers in criteria_of_people.items():
            lines.append(
                ranking_line(
                    f"q{p}", replies, [[0], [1], [2], [3]], "rm", "ai", id=f"rm-{p}", criterion=criterion, scores=SCORES
                )
            )
            for who in ("alice", "bob"):
                lines.append(ranking_line(f"q{p}", replies, tiers, who, id=f"{who}-{p}", criterion=criterion))
    return lines


def test_the_human_reference_is_the_borda_of_one_criterions_rankings(cli, sessions, tmp_path):
    first_best, last_best = [[0], [1], [2, 3]], [[3], [2], [1], [0]]
    helpful = write_lines(tmp_path / "helpful.jsonl", _lines({"helpfulness": first_best}))
    cli("import", "rankings", helpful)
    with sessions() as s:
        before, _ = db_groups(s, "rm", "human", criterion="helpfulness")
    cli("import", "rankings", write_lines(tmp_path / "harmless.jsonl", _lines({"harmlessness": last_best})))
    with sessions() as s:
        helpful_groups, summary = db_groups(s, "rm", "human", criterion="helpfulness")
        harmless_groups, _ = db_groups(s, "rm", "human", criterion="harmlessness")
        with pytest.raises(NotFound, match=r"no valid rankings of criterion 'overall' \(its criteria: harm"):
            db_groups(s, "rm", "human")
    # Borda of the people's rankings, written out: best 1, then 2/3, the tie (1/3 + 0)/2 each.
    assert summary.prompts == PROMPTS and summary.samples == PROMPTS * len(SCORES)
    for (_, proxy, true), (_, proxy_b, true_b) in zip(helpful_groups, harmless_groups, strict=True):
        assert list(proxy) == list(proxy_b) == SCORES
        assert np.allclose(true, [1.0, 2 / 3, 1 / 6, 1 / 6]) and np.allclose(true_b, [0.0, 1 / 3, 2 / 3, 1.0])
    # The other criterion's rankings changed nothing of this one's.
    assert [(g, list(p), list(t)) for g, p, t in before] == [(g, list(p), list(t)) for g, p, t in helpful_groups]
