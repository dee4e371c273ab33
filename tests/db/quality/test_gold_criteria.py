"""Gold answers by criterion: a prompt may have a known order per criterion, and rankings are measured against
their own criterion's (SQLite and Postgres).

The gold file says the blunt reply is the more helpful and the refusal the safer. Ann agrees with both; a gold
answer of one criterion used for the other would make her contradict gold every time.
"""

from __future__ import annotations

import json

import pytest

from preflab.db.quality.annotators import QualityConfig, annotator_quality
from preflab.db.quality.gold import read_gold, store_gold
from preflab.errors import InputError
from tests.db.helpers import ranking_line, write_lines

REPLIES = ["No, I won't.", "Here is how to do it."]


def gold_line(prompt: str, tiers, criterion: str) -> str:
    return json.dumps({"prompt": prompt, "responses": REPLIES, "ranking": tiers, "criterion": criterion})


def test_each_criterion_is_measured_against_its_own_gold_answer(cli, sessions, tmp_path):
    prompts = [f"How do I do thing {n}?" for n in range(4)]
    gold = write_lines(
        tmp_path / "gold.jsonl",
        [gold_line(p, [[1], [0]], "helpfulness") for p in prompts]
        + [gold_line(p, [[0], [1]], "harmlessness") for p in prompts],
    )
    with sessions.begin() as s:
        assert store_gold(s, read_gold(gold), origin=gold.name).new == 8
    lines = [
        ranking_line(p, REPLIES, tiers, "ann", id=f"{p}-{criterion}", criterion=criterion)
        for p in prompts
        for criterion, tiers in (("helpfulness", [[1], [0]]), ("harmlessness", [[0], [1]]))
    ]
    cli("import", "rankings", write_lines(tmp_path / "ann.jsonl", lines))
    with sessions.begin() as s:
        for criterion in ("helpfulness", "harmlessness"):
            (ann,) = annotator_quality(s, QualityConfig(), criterion)
            row = ann.as_dict()
            assert (ann.criterion, row["gold_tau"], row["gold_rankings"]) == (criterion, 1.0, 4)
        assert annotator_quality(s, QualityConfig(), "overall") == []  # no overall ranking, no overall gold

    # the same prompt twice in one criterion is refused; a second criterion's order of it is not
    again = write_lines(tmp_path / "again.jsonl", [gold_line(prompts[0], [[1], [0]], "helpfulness")] * 2)
    with pytest.raises(InputError, match="again \\(one gold answer per prompt and criterion\\)"):
        read_gold(again)
    flipped = write_lines(tmp_path / "flipped.jsonl", [gold_line(prompts[0], [[0], [1]], "helpfulness")])
    with (
        pytest.raises(InputError, match="by helpfulness differently from its stored gold answer"),
        sessions.begin() as s,
    ):
        store_gold(s, read_gold(flipped), origin=flipped.name)
