"""TRL preference rows: `chosen` > `rejected`, standard (text) or conversational (messages).

- explicit prompt: `prompt` (text or messages) and the replies alone in `chosen` and `rejected`;
- implicit prompt: `chosen` and `rejected` are whole conversations; the prompt is their longest
  shared prefix ending with a user turn, and each reply is what follows it (`split_shared`).
  HuggingFaceH4/ultrafeedback_binarized is this, with a `prompt` string beside them: it must be
  the last user turn of that prefix.
- `score_chosen` and `score_rejected`, when given, are kept as the replies' scores.

Plain-text `chosen` and `rejected` without a `prompt` carry no prompt to separate: quarantined.
The TRL format does not say who chose: every row is ranked by one annotator, `trl`.
"""

from __future__ import annotations

from typing import Any

from preflab.db.conversation import Messages, prompt_messages
from preflab.db.ingest.datasets.base import Format, Invalid, messages_or_text, number, ranking, split_shared
from preflab.db.ingest.records import RankingRecord

ANNOTATOR = "trl"
NAMES = ("'chosen'", "'rejected'")


def _whole(reply: str | Messages) -> bool:
    """A conversation from its start (its first turn is not the assistant's), not only the reply."""
    return isinstance(reply, list) and reply[0]["role"] != "assistant"


def _implicit(row: dict[str, Any], chosen: Messages, rejected: Messages) -> tuple[Messages, Messages, Messages]:
    prompt, better, worse = split_shared(chosen, rejected)
    given = row.get("prompt")
    if isinstance(given, str):
        if given.strip() != prompt[-1]["content"].strip():
            raise Invalid("'prompt' is not the last user turn of the conversation 'chosen' and 'rejected' share")
    elif given is not None and prompt_messages(given, "'prompt'") != prompt:
        raise Invalid("'prompt' is not the conversation 'chosen' and 'rejected' share")
    return prompt, better, worse


def parse(row: dict[str, Any]) -> list[RankingRecord]:
    chosen, rejected = messages_or_text(row, "chosen"), messages_or_text(row, "rejected")
    if _whole(chosen) or _whole(rejected):
        if not (_whole(chosen) and _whole(rejected)):
            raise Invalid("one of 'chosen' and 'rejected' is a whole conversation and the other is not")
        prompt, better, worse = _implicit(row, chosen, rejected)
    elif row.get("prompt") is None:
        raise Invalid("'chosen' and 'rejected' are replies without a 'prompt' (an implicit prompt needs "
                      "whole conversations: lists of messages)")
    else:
        prompt, better, worse = prompt_messages(row["prompt"], "'prompt'"), chosen, rejected
    scores = None
    if row.get("score_chosen") is not None or row.get("score_rejected") is not None:
        scores = [number(row, "score_chosen"), number(row, "score_rejected")]
    return [ranking(prompt, [better, worse], [[0], [1]], ANNOTATOR, scores=scores, names=NAMES)]


EXAMPLE = ('{"prompt": "Name a prime number.", '
           '"chosen": [{"role": "user", "content": "Name a prime number."}, {"role": "assistant", "content": "7"}], '
           '"rejected": [{"role": "user", "content": "Name a prime number."}, {"role": "assistant", "content": "9"}], '
           '"score_chosen": 9.0, "score_rejected": 2.0}')

FORMAT = Format(name="trl", columns=frozenset({"chosen", "rejected"}), parse=parse, example=EXAMPLE)
