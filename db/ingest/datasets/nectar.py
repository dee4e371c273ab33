"""berkeley-nest/Nectar: an HH-style `prompt` and `answers[]` (`answer`, `model`, `rank`, 1 best).

One k-wise ranking of the answers by `rank` (equal ranks tie), by an AI annotator (the dataset
card: the answers were ranked by GPT-4: `nectar-gpt-4`). The prompt is parsed into messages as
hh-rlhf's transcripts are; its trailing empty `Assistant:` turn is where the answers go. Each
answer's `model` becomes its candidate's model. Fewer than two answers, or two identical ones,
are quarantined; an empty answer beside two or more others is set aside (`without_empty`): the
import quarantines it alone and ranks the others.
"""

from __future__ import annotations

from typing import Any

from preflab.db.ingest.datasets.base import Format, number, ranking, text, without_empty
from preflab.db.ingest.datasets.hh import transcript_messages
from preflab.db.ingest.records import RankingRecord
from preflab.db.pairs.build import tiers_from_scores
from preflab.errors import Invalid

ANNOTATOR, KIND = "nectar-gpt-4", "ai"


def parse(row: dict[str, Any]) -> list[RankingRecord]:
    prompt = transcript_messages(text(row, "prompt"), "'prompt'")
    answers = row.get("answers")
    if not isinstance(answers, list):
        raise Invalid("missing 'answers' (a list of answers with 'answer', 'model' and 'rank')")
    for i, item in enumerate(answers):
        if not isinstance(item, dict):
            raise Invalid(f"'answers'[{i}] is not an object with 'answer', 'model' and 'rank'")
    names = [f"'answers'[{i}]" for i in range(len(answers))]
    kept, set_aside = without_empty([item.get("answer") for item in answers], names, answers)
    replies, models, ranks = [], [], {}
    for n, i in enumerate(kept):
        replies.append(text(answers[i], "answer"))
        model = answers[i].get("model")
        models.append(model if isinstance(model, str) and model.strip() else None)
        ranks[n] = -number(answers[i], "rank")  # rank 1 is the best: the highest score
    record = ranking(
        prompt, replies, tiers_from_scores(ranks), ANNOTATOR, kind=KIND, models=models, names=[names[i] for i in kept]
    )
    record.set_aside = set_aside
    return [record]


EXAMPLE = (
    '{"prompt": "\\n\\nHuman: Give me a word that rhymes with cat.\\n\\nAssistant: ", '
    '"answers": [{"answer": "Hat.", "model": "gpt-4", "rank": 1.0}, '
    '{"answer": "Dog.", "model": "llama-2-7b-chat", "rank": 2.0}], '
    '"turns": 1, "num_responses": 2, "source": ["sharegpt"], "good_natured": true}'
)

FORMAT = Format(
    name="nectar",
    columns=frozenset({"prompt", "answers"}),
    parse=parse,
    example=EXAMPLE,
    annotator=ANNOTATOR,
    kind=KIND,
    judged_by="GPT-4",
    texts=frozenset({"prompt"}),
)
