"""How a format's rows become checked rankings: `ranking`, `Replies` (one row's, by several criteria), `by_criteria`.

`ranking` builds a record from a dataset's parts, checking them as an import checks its lines: the
prompt ends with the user's turn, the replies are distinct, every string is storable. A dataset that
rates the same replies by several criteria (UltraFeedback's aspects, PKU-SafeRLHF's two verdicts,
HelpSteer2's attributes) ranks them once per criterion: `Replies` checks and hashes the row's prompt and
replies once for all its rankings, and `by_criteria` gives a ranking per criterion, setting aside (not
losing the row for) a criterion that cannot rank it. `preflab.db.ingest.datasets.base` re-exports these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from preflab.db.conversation import Messages, prompt_hash, prompt_messages, reply_hash, reply_messages
from preflab.db.ingest.records import KINDS, LIMITS, RankingRecord, first_repeat, shown, unstorable, unstorable_text
from preflab.db.models import OVERALL
from preflab.errors import Invalid

__all__ = ["Replies", "by_criteria", "ranking"]


def ranking(
    prompt: Any,
    replies: Sequence[Any],
    tiers: Sequence[Sequence[int]],
    annotator: str,
    *,
    kind: str = "human",
    models: Sequence[str | None] | None = None,
    scores: Sequence[float | None] | None = None,
    details: dict[str, Any] | None = None,
    external_id: str | None = None,
    source: str | None = None,
    names: Sequence[str] | None = None,
    fewest: int = 2,
    criterion: str = OVERALL,
) -> RankingRecord:
    """A checked ranking of `replies` (strings or message lists) for `prompt` (a string or messages).

    `tiers`: indices into `replies`, best first; a tie is one tier holding both.
    `names`: what the replies are called in a reason ("'chosen'"; default "reply 0", "reply 1"…).
    `fewest`: the fewest replies it may hold (1 only for an Arena battle of identical replies, `arena`).
    `criterion`: what the order is by (`overall` unless the dataset rates several things).
    Raises Invalid naming the field that cannot be used.
    """
    return Replies(prompt, replies, names, models).ranking(
        range(len(replies)),
        tiers,
        annotator,
        kind=kind,
        scores=scores,
        details=details,
        external_id=external_id,
        source=source,
        fewest=fewest,
        criterion=criterion,
    )


class Replies:
    """A row's prompt and replies, each checked and hashed once however many rankings of them the row gives.

    `ranking(indices, …)` is `ranking(prompt, [replies[i] for i in indices], …)`: the same record, or the same
    Invalid. A dataset that rates the same replies by several criteria ranks some of them per criterion
    (`by_criteria`), and its rankings share the messages and hashes made once here: five rankings of a row
    hold one copy of them (`bench/bench_import_datasets.py`: UltraFeedback by every criterion).
    """

    def __init__(
        self,
        prompt: Any,
        replies: Sequence[Any],
        names: Sequence[str] | None = None,
        models: Sequence[str | None] | None = None,
    ):
        self.prompt, self.replies, self.models = prompt, replies, models
        self.names = list(names or [f"reply {i}" for i in range(len(replies))])
        self._turns: Messages | None = None
        self._prompt_hash: str | None = None
        self._answers: list[Messages | None] = [None] * len(replies)
        self._hashes: list[str | None] = [None] * len(replies)
        self._storable: list[bool | None] = [None] * len(replies)

    def _prompt(self) -> Messages:
        if self._turns is None:
            self._turns = prompt_messages(self.prompt, "the prompt")
            self._prompt_storable = not unstorable_text("".join(t["content"] for t in self._turns))
        return self._turns

    def _answer(self, i: int) -> Messages:
        answer = self._answers[i]
        if answer is None:
            answer = self._answers[i] = reply_messages(self.replies[i], self.names[i])
        return answer

    def _hash(self, i: int) -> str:
        found = self._hashes[i]
        if found is None:
            found = self._hashes[i] = reply_hash(self._answers[i])
        return found

    def _text_storable(self, i: int) -> bool:
        found = self._storable[i]
        if found is None:
            found = self._storable[i] = not unstorable_text("".join(t["content"] for t in self._answers[i]))
        return found

    def ranking(
        self,
        indices: Sequence[int],
        tiers: Sequence[Sequence[int]],
        annotator: str,
        *,
        kind: str = "human",
        scores: Sequence[float | None] | None = None,
        details: dict[str, Any] | None = None,
        external_id: str | None = None,
        source: str | None = None,
        fewest: int = 2,
        criterion: str = OVERALL,
    ) -> RankingRecord:
        """A checked ranking of the replies at `indices`; `tiers` index into `indices`. Raises Invalid."""
        turns = self._prompt()
        answers = [self._answer(i) for i in indices]
        if len(answers) < fewest:
            raise Invalid(f"fewer than two replies ({len(answers)})")
        hashes = [self._hash(i) for i in indices]
        if repeat := first_repeat(hashes):
            raise Invalid(f"{self.names[indices[repeat[0]]]} and {self.names[indices[repeat[1]]]} are identical")
        models = [None] * len(answers) if self.models is None else [self.models[i] for i in indices]
        models = [None if m is None else _fits("model", m) for m in models]
        if external_id is not None:
            external_id = _fits("id", external_id)
        if kind not in KINDS:
            raise Invalid(f"unknown annotator kind {kind!r}")
        # Each text checked once (the walk naming the field runs only when something is wrong: it costs more
        # than the rest of a ranking together, bench/README.md).
        storable = self._prompt_storable and all(self._text_storable(i) for i in indices)
        if not storable or unstorable_text(annotator) or (details is not None and not _storable(details)):
            raise Invalid(
                unstorable({"prompt": turns, "replies": answers, "annotator": annotator, "details": details})
                or "holds text the database cannot store"
            )
        if self._prompt_hash is None:  # after the check: a text that cannot be stored cannot be hashed either
            self._prompt_hash = prompt_hash(turns)
        return RankingRecord(
            prompt=turns,
            responses=answers,
            tiers=[list(t) for t in tiers],
            annotator=annotator,
            kind=kind,
            external_id=external_id,
            models=models,
            scores=None if scores is None else list(scores),
            source=source,
            details=details,
            prompt_hash=self._prompt_hash,
            response_hashes=hashes,
            criterion=criterion,
        )


def by_criteria(
    criteria: Sequence[str], build: Callable[[str], RankingRecord], whole: Any, unit: str = "row"
) -> list[RankingRecord]:
    """One ranking per criterion, `build(criterion)`, which raises Invalid where the criterion gives none.

    A criterion that gives no ranking does not lose the others: it is set aside on the first ranking
    (`RankingRecord.set_aside`), a part of the row named by the criterion with `whole` (the row, or a
    group's rows) as its payload, which the import quarantines alone with its reason. When no criterion
    gives one, raises Invalid: the row is quarantined whole, for the reason every criterion gave (else each
    criterion's).
    """
    records, failed = [], []
    for criterion in criteria:
        try:
            records.append(build(criterion))
        except Invalid as exc:
            failed.append((criterion, str(exc)))
    if not records:
        reasons = dict.fromkeys(reason for _, reason in failed)
        if len(reasons) == 1:
            raise Invalid(next(iter(reasons)))
        raise Invalid("no criterion gives a ranking (" + "; ".join(f"{c}: {r}" for c, r in failed) + ")")
    records[0].set_aside += [
        (criterion, whole, f"no {criterion} ranking: {reason}; the {unit}'s other criteria are ranked")
        for criterion, reason in failed
    ]
    return records


def _storable(value: Any) -> bool:
    """Whether every string in a JSON value can be stored (orjson refuses a lone surrogate, escapes a NUL)."""
    try:
        return b"\\u0000" not in orjson.dumps(value)
    except TypeError:
        return False


def _fits(key: str, value: str) -> str:
    if len(value) > LIMITS[key]:
        raise Invalid(f"the {key} {shown(value)} is {len(value):,} characters long, over the limit of {LIMITS[key]}")
    return value
