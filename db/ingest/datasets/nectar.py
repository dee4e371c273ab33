"""berkeley-nest/Nectar: an HH-style `prompt` and `answers[]` (`answer`, `model`, `rank`, 1 best).

One k-wise ranking of the answers by `rank` (equal ranks tie), by an AI annotator (GPT-4 ranked
them: `nectar-gpt-4`). The prompt is parsed into messages as hh-rlhf's transcripts are; its
trailing empty `Assistant:` turn is where the answers go. Each answer's `model` becomes its
candidate's model. Fewer than two answers, or two identical ones, are quarantined.
"""

from __future__ import annotations

from typing import Any

from preflab.db.ingest.datasets.base import Format, Invalid, number, ranking, text
from preflab.db.ingest.datasets.hh import transcript_messages
from preflab.db.ingest.records import RankingRecord
from preflab.db.pairs.build import tiers_from_scores

ANNOTATOR = "nectar-gpt-4"


def parse(row: dict[str, Any]) -> list[RankingRecord]:
    prompt = transcript_messages(text(row, "prompt"), "'prompt'")
    answers = row.get("answers")
    if not isinstance(answers, list):
        raise Invalid("missing 'answers' (a list of answers with 'answer', 'model' and 'rank')")
    replies, models, ranks = [], [], {}
    for i, item in enumerate(answers):
        if not isinstance(item, dict):
            raise Invalid(f"'answers'[{i}] is not an object with 'answer', 'model' and 'rank'")
        replies.append(text(item, "answer"))
        model = item.get("model")
        models.append(model if isinstance(model, str) and model.strip() else None)
        ranks[i] = -number(item, "rank")  # rank 1 is the best: the highest score
    names = [f"'answers'[{i}]" for i in range(len(replies))]
    return [ranking(prompt, replies, tiers_from_scores(ranks), ANNOTATOR, kind="ai", models=models, names=names)]


EXAMPLE = ('{"prompt": "\\n\\nHuman: Give me a word that rhymes with cat.\\n\\nAssistant: ", '
           '"answers": [{"answer": "Hat.", "model": "gpt-4", "rank": 1.0}, '
           '{"answer": "Dog.", "model": "llama-2-7b-chat", "rank": 2.0}], '
           '"turns": 1, "num_responses": 2, "source": ["sharegpt"], "good_natured": true}')

FORMAT = Format(name="nectar", columns=frozenset({"prompt", "answers"}), parse=parse, example=EXAMPLE)
