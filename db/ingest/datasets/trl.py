"""TRL preference rows: `chosen` > `rejected`, standard (text) or conversational (messages).

- explicit prompt: `prompt` (text or messages) and the replies alone in `chosen` and `rejected`;
- implicit prompt: `chosen` and `rejected` are whole conversations; the prompt is their longest
  shared prefix ending with a user turn, and each reply is what follows it (`split_shared`).
  HuggingFaceH4/ultrafeedback_binarized is this, with a `prompt` string beside them: it must be
  the last user turn of that prefix.
- `score_chosen` and `score_rejected`, when given, are kept as the replies' scores; equal scores are a
  tie (one tier), as the ultrafeedback format ranks equal scores.

Plain-text `chosen` and `rejected` without a `prompt` carry no prompt to separate: quarantined.

Who chose: the TRL format does not say, so preflab assumes (`FORMAT.assumed`, which the import's
summary reports, with `--annotator`/`--annotator-kind` to say otherwise). A row with `score_chosen`
and `score_rejected` is the UltraFeedback-binarized shape (HuggingFaceH4/ultrafeedback_binarized:
`prompt`, `prompt_id`, `chosen`, `rejected`, `messages`, `score_chosen`, `score_rejected`), whose
scores are GPT-4's UltraFeedback ratings: an AI annotator, `HuggingFaceH4/ultrafeedback_binarized`.
Any other row is ranked by one human annotator, `trl`.

A row's `prompt_id` (the binarized file's, the SHA-256 of its prompt) with its pair is the ranking's id
(`preflab.db.ingest.identity.pair_identity`): files derived from the same prompts pair other replies.
Without one, the import identifies the ranking by what it holds.
"""

from __future__ import annotations

from typing import Any

from preflab.db.conversation import Messages, prompt_messages
from preflab.db.ingest.datasets.base import Format, messages_or_text, number, ranking, split_shared
from preflab.db.ingest.identity import pair_identity
from preflab.db.ingest.records import RankingRecord
from preflab.errors import Invalid

ANNOTATOR = "trl"
BINARIZED = "HuggingFaceH4/ultrafeedback_binarized"
NAMES = ("'chosen'", "'rejected'")
# Why each annotator is an assumption (the import's summary says so)
ASSUMED = {
    ANNOTATOR: "the trl format does not say who chose",
    BINARIZED: "score_chosen and score_rejected are the UltraFeedback-binarized shape, whose scores are "
    "GPT-4's ratings",
}


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
        raise Invalid(
            "'chosen' and 'rejected' are replies without a 'prompt' (an implicit prompt needs "
            "whole conversations: lists of messages)"
        )
    else:
        prompt, better, worse = prompt_messages(row["prompt"], "'prompt'"), chosen, rejected
    if row.get("score_chosen") is None and row.get("score_rejected") is None:
        record = ranking(prompt, [better, worse], [[0], [1]], ANNOTATOR, names=NAMES)
    else:
        scores = [number(row, "score_chosen"), number(row, "score_rejected")]
        tiers = [[0, 1]] if scores[0] == scores[1] else [[0], [1]]
        record = ranking(prompt, [better, worse], tiers, BINARIZED, kind="ai", scores=scores, names=NAMES)
    record.external_id = pair_identity(row.get("prompt_id"), *record.response_hashes)
    return [record]


EXAMPLE = (
    '{"prompt": "Name a prime number.", '
    '"chosen": [{"role": "user", "content": "Name a prime number."}, {"role": "assistant", "content": "7"}], '
    '"rejected": [{"role": "user", "content": "Name a prime number."}, {"role": "assistant", "content": "9"}], '
    '"score_chosen": 9.0, "score_rejected": 2.0}'
)

FORMAT = Format(
    name="trl",
    columns=frozenset({"chosen", "rejected"}),
    parse=parse,
    example=EXAMPLE,
    annotator=f"{ANNOTATOR} (human); with scores, {BINARIZED} (ai)",
    kind="human",
    judged_by="not said: assumed people; GPT-4 for the UltraFeedback-binarized shape",
    assumed=ASSUMED,
    texts=frozenset({"prompt", "prompt_id", "chosen", "rejected"}),
)
