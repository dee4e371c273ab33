"""The pairwise LLM judge: every pair of a prompt's candidates, asked in both orders.

The verdict is read from the next-token probabilities of the two answer letters
("A", "B") after the judge prompt: one forward pass per order, batched, no text
decoded. A pair whose two orders disagree is a tie, not a win: a judge that
always prefers the first answer (position bias) yields only ties. The pair
outcomes become a ranking by Copeland score (wins − losses) or Bradley–Terry.
A prompt that is a conversation is shown whole, as its transcript, above the two
responses (`prompts.PAIRWISE_CONVERSATION_USER`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations

from preflab.db.conversation import Messages, is_multi_turn, transcript, user_turn
from preflab.errors import ConfigError
from preflab.labelling.judges.base import Judgement
from preflab.labelling.judges.prompts import (
    PAIRWISE_CONVERSATION_SYSTEM,
    PAIRWISE_CONVERSATION_USER,
    PAIRWISE_SYSTEM,
    PAIRWISE_USER,
)
from preflab.labelling.selection import PromptCandidates
from preflab.lm.forward import next_token_logprobs

AGGREGATES = ("copeland", "bradley-terry")


@dataclass
class PairwiseConfig:
    """How the pairwise judge asks and aggregates."""

    aggregate: str = field(
        default="copeland", metadata={"help": "How pair outcomes become a ranking.", "choices": AGGREGATES}
    )
    batch_size: int = field(default=8, metadata={"help": "Judge prompts per forward pass."})

    def __post_init__(self):
        if self.aggregate not in AGGREGATES:
            raise ConfigError(f"unknown aggregate {self.aggregate!r} (expected one of {', '.join(AGGREGATES)})")
        if self.batch_size < 1:
            raise ConfigError("--batch-size must be at least 1")


def letter_ids(tokenizer, letter: str) -> list[int]:
    """The single-token spellings of an answer letter ("A" and " A" where both exist)."""
    ids = []
    for spelling in (letter, " " + letter):
        encoded = tokenizer(spelling, add_special_tokens=False)["input_ids"]
        if len(encoded) == 1 and encoded[0] not in ids:
            ids.append(encoded[0])
    if not ids:
        raise ConfigError(f"the judge's tokenizer has no single token for {letter!r}")
    return ids


def judge_messages(prompt: str | Messages, first: str, second: str) -> Messages:
    """The judge's conversation for two responses to `prompt` (a user's message, or the conversation so far):
    its system prompt and one user message (a server applies the chat template to these)."""
    turns = user_turn(prompt) if isinstance(prompt, str) else prompt
    if is_multi_turn(turns):
        user = PAIRWISE_CONVERSATION_USER.format(conversation=transcript(turns), a=first, b=second)
        return [{"role": "system", "content": PAIRWISE_CONVERSATION_SYSTEM}, {"role": "user", "content": user}]
    return [
        {"role": "system", "content": PAIRWISE_SYSTEM},
        {"role": "user", "content": PAIRWISE_USER.format(question=turns[0]["content"], a=first, b=second)},
    ]


def judge_text(tokenizer, prompt: str | Messages, first: str, second: str) -> str:
    """The judge's prompt for two responses to `prompt`, in the judge model's chat format."""
    from preflab.lm.loading import chat_prompt

    return chat_prompt(tokenizer, judge_messages(prompt, first, second))


def prob_first_better(model, tokenizer, texts: list[str], batch_size: int = 8) -> list[float]:
    """P("A") / (P("A") + P("B")) for the judge's next token after each judge prompt."""
    a_ids, b_ids = letter_ids(tokenizer, "A"), letter_ids(tokenizer, "B")
    rows = next_token_logprobs(model, tokenizer, texts, a_ids + b_ids, batch_size)
    out = []
    for row in rows:
        la = _logsumexp(row[: len(a_ids)])
        lb = _logsumexp(row[len(a_ids) :])
        out.append(1.0 / (1.0 + math.exp(lb - la)))
    return out


def verdicts_by_generation(
    model, tokenizer, texts: list[str], batch_size: int = 8, max_new_tokens: int = 8
) -> list[float | None]:
    """The baseline: decode the verdict as text (greedy) and read the first A or B (1.0 = A)."""
    import re

    from preflab.lm.forward import by_length
    from preflab.lm.sampling import generate_texts

    out: list[float | None] = [None] * len(texts)
    for part in by_length([tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts], batch_size):
        for i, g in zip(
            part,
            generate_texts(model, tokenizer, [texts[i] for i in part], max_new_tokens=max_new_tokens, do_sample=False),
        ):
            found = re.search(r"\b([AB])\b", g.text)
            out[i] = None if found is None else float(found.group(1) == "A")
    return out


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def outcome(p_as_a: float | None, p_as_b: float | None) -> str:
    """A candidate's outcome against another from P(it is better) shown first and shown second.

    An order whose verdict could not be read (None: a server's reply that named neither answer)
    makes the pair an abstention: not a tie, not a guess.
    """
    if p_as_a is None or p_as_b is None:
        return "abstain"
    if p_as_a > 0.5 and p_as_b > 0.5:
        return "win"
    if p_as_a < 0.5 and p_as_b < 0.5:
        return "loss"
    return "tie"


FLIPPED = {"win": "loss", "loss": "win"}
TALLY = {"win": "wins", "loss": "losses", "tie": "ties", "abstain": "abstentions"}


def _flip(p: float | None) -> float | None:
    return None if p is None else 1 - p


def _round(p: float | None) -> float | None:
    return None if p is None else round(p, 4)


def rank_pairs(
    candidate_ids: list[int], results: dict[tuple[int, int], tuple[float | None, float | None]], aggregate: str
) -> Judgement:
    """Scores and details from each pair's (P(x better | x first), P(x better | x second))."""
    return rank_outcomes(candidate_ids, {pair: (outcome(*ps), *ps, {}) for pair, ps in results.items()}, aggregate)


def rank_outcomes(
    candidate_ids: list[int],
    verdicts: dict[tuple[int, int], tuple[str, float | None, float | None, dict]],
    aggregate: str,
) -> Judgement:
    """Scores and details from each pair's (x's outcome, P(x better | x first), P(x better | x second), more
    details of the pair). An abstention counts for neither candidate (and is kept in their details); a candidate
    whose every pair was an abstention has no score (None): nothing was read about it, so it is not ranked, and
    a prompt where no pair was read is no ranking at all, never a tie of everything."""
    details = {c: {"wins": 0, "losses": 0, "ties": 0, "pairs": []} for c in candidate_ids}
    decided: list[list[list[int]]] = []
    read: set[int] = set()  # candidates with a verdict in at least one pair (a tie is a verdict)
    for (x, y), (result, p_first, p_second, extra) in verdicts.items():
        for me, other, p_a, p_b, mine in (
            (x, y, p_first, p_second, result),
            (y, x, _flip(p_second), _flip(p_first), FLIPPED.get(result, result)),
        ):
            d = details[me]
            d[TALLY[mine]] = d.get(TALLY[mine], 0) + 1
            d["pairs"].append({"vs": other, "p_as_a": _round(p_a), "p_as_b": _round(p_b), "outcome": mine, **extra})
        if result != "abstain":
            decided.append([[x], [y]] if result == "win" else [[y], [x]] if result == "loss" else [[x, y]])
            read.update((x, y))
    scores: dict[int, float | None]
    if aggregate == "bradley-terry":
        from preflab.db.pairs.build import bradley_terry

        strengths = bradley_terry(decided)
        scores = {c: round(strengths.get(c, 0.0), 6) if c in read else None for c in candidate_ids}
    else:
        scores = {c: float(details[c]["wins"] - details[c]["losses"]) if c in read else None for c in candidate_ids}
    return scores, details


def make_judge(model, tokenizer, config: PairwiseConfig):
    """A function from a batch of prompts to their judgements."""

    def judge(items: list[PromptCandidates]) -> list[Judgement]:
        pairs = [(k, i, j) for k, item in enumerate(items) for i, j in combinations(range(len(item.texts)), 2)]
        # All first orders, then all swapped orders: each order is one batched pass.
        # The conversation so far is shown above the two responses (a reply of several turns as its transcript).
        texts = [judge_text(tokenizer, items[k].history, items[k].texts[i], items[k].texts[j]) for k, i, j in pairs]
        texts += [judge_text(tokenizer, items[k].history, items[k].texts[j], items[k].texts[i]) for k, i, j in pairs]
        probs = prob_first_better(model, tokenizer, texts, config.batch_size)
        per_item: list[dict[tuple[int, int], tuple[float, float]]] = [{} for _ in items]
        for n, (k, i, j) in enumerate(pairs):
            ids = items[k].candidate_ids
            per_item[k][(ids[i], ids[j])] = (probs[n], 1.0 - probs[n + len(pairs)])
        return [rank_pairs(item.candidate_ids, results, config.aggregate) for item, results in zip(items, per_item)]

    return judge
