"""The pairwise LLM judge: every pair of a prompt's candidates, asked in both orders, on an engine.

The verdict is read from the log-probabilities of the two answer letters ("A", "B") as the
reply's first token, the reply held to them: P("A") / (P("A") + P("B")). In process that is one
forward pass per order, batched, no text decoded; on a server, its first token's alternatives
(`preflab.lm.engines`). A reply that names neither letter cannot be read: the pair is an
abstention, never a guess. A pair whose two orders disagree is a tie, not a win: a judge that
always prefers the first answer (position bias) yields only ties. The pair outcomes become a
ranking by Copeland score (wins − losses) or Bradley–Terry. A prompt that is a conversation is
shown whole, as its transcript, above the two responses (`prompts.PAIRWISE_CONVERSATION_USER`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations
from math import exp

from preflab.db.conversation import Messages, is_multi_turn, transcript, user_turn
from preflab.errors import ConfigError
from preflab.labelling.judges.base import Judgement, read_choices, unanswered
from preflab.labelling.judges.criteria import CriterionConfig, pairwise_system
from preflab.labelling.judges.prompts import (
    PAIRWISE_CONVERSATION_SYSTEM,
    PAIRWISE_CONVERSATION_USER,
    PAIRWISE_SYSTEM,
    PAIRWISE_USER,
)
from preflab.labelling.selection import PromptCandidates
from preflab.lm.engines import Engine, Logprobs

AGGREGATES = ("copeland", "bradley-terry")
VERDICT = ("A", "B")
# A server that holds no verdict to its choices may write a word or two first: the letter is read further in.
VERDICT_TOKENS = 4


@dataclass
class PairwiseConfig(CriterionConfig):
    """How the pairwise judge asks and aggregates, and by which criterion (`CriterionConfig`)."""

    aggregate: str = field(
        default="copeland", metadata={"help": "How pair outcomes become a ranking.", "choices": AGGREGATES}
    )
    batch_size: int = field(default=8, metadata={"help": "Judge prompts per forward pass."})

    def __post_init__(self):
        super().__post_init__()
        if self.aggregate not in AGGREGATES:
            raise ConfigError(f"unknown aggregate {self.aggregate!r} (expected one of {', '.join(AGGREGATES)})")
        if self.batch_size < 1:
            raise ConfigError("--batch-size must be at least 1")


def judge_messages(
    prompt: str | Messages, first: str, second: str, criterion: CriterionConfig | None = None
) -> Messages:
    """The judge's conversation for two responses to `prompt` (a user's message, or the conversation so far):
    its system prompt and one user message (a server applies the chat template to these). `criterion`: the
    rubric the better answer is chosen by (none, or `overall`: the prompt as it is)."""
    turns = user_turn(prompt) if isinstance(prompt, str) else prompt
    rubric = None if criterion is None else criterion.rubric()
    name = None if criterion is None else criterion.criterion
    if is_multi_turn(turns):
        user = PAIRWISE_CONVERSATION_USER.format(conversation=transcript(turns), a=first, b=second)
        system = pairwise_system(PAIRWISE_CONVERSATION_SYSTEM, name, rubric)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return [
        {"role": "system", "content": pairwise_system(PAIRWISE_SYSTEM, name, rubric)},
        {"role": "user", "content": PAIRWISE_USER.format(question=turns[0]["content"], a=first, b=second)},
    ]


def judge_text(tokenizer, prompt: str | Messages, first: str, second: str) -> str:
    """The judge's prompt for two responses to `prompt`, in the judge model's chat format."""
    from preflab.lm.loading import chat_prompt

    return chat_prompt(tokenizer, judge_messages(prompt, first, second))


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


def prefix_waves(orders: list[tuple[int, int, int]]) -> tuple[list[int], list[int]]:
    """The asks (prompt, reply shown first, reply shown second) in two waves, by index: first one ask for each
    prompt and reply shown first, then the rest.

    A judge prompt is the rubric, the question, the reply shown first, then the other. Asked at once, asks that
    share all but the last reply are read side by side, each from the start; in a second wave, a server with a
    prefix cache (vLLM's is on by default) reads them from the first wave's, as the engine in process reads its
    rubric once. With 4 replies, 8 of a prompt's 12 asks then read only the last reply.
    """
    leads: dict[tuple[int, int], int] = {}
    for n, (k, first, _) in enumerate(orders):
        leads.setdefault((k, first), n)
    first_wave = sorted(leads.values())
    led = set(first_wave)
    return first_wave, [n for n in range(len(orders)) if n not in led]


def _p_first(answer) -> tuple[float | None, str | None]:
    """(P("A") / (P("A") + P("B")), None), or (None, why the verdict cannot be read)."""
    read, why = read_choices(answer, VERDICT)
    if read is None:
        return None, why
    la, lb = read["A"], read["B"]
    if la == float("-inf"):
        return 0.0, None
    return 1.0 / (1.0 + exp(lb - la)) if lb != float("-inf") else 1.0, None


def judge_on(engine: Engine, config: PairwiseConfig) -> Callable[[list[PromptCandidates]], list[Judgement | None]]:
    """A function from a batch of prompts to their judgements on `engine` (None: a prompt a server left
    unanswered, asked again by the next run)."""

    def judge(items: list[PromptCandidates]) -> list[Judgement | None]:
        pairs = [(k, i, j) for k, item in enumerate(items) for i, j in combinations(range(len(item.texts)), 2)]

        def ask(k: int, first: int, second: int) -> Logprobs:
            return Logprobs(
                judge_messages(items[k].history, items[k].texts[first], items[k].texts[second], config),
                choices=VERDICT,
                max_tokens=VERDICT_TOKENS,
            )

        # All first orders, then all swapped orders; where a prefix cache is worth it, in two waves (`prefix_waves`).
        # The conversation so far is shown above the two responses (a reply of several turns as its transcript).
        orders = [(k, i, j) for k, i, j in pairs] + [(k, j, i) for k, i, j in pairs]
        answers: list = [None] * len(orders)
        for wave in prefix_waves(orders) if engine.prefix_ordering else [range(len(orders))]:
            for n, answer in zip(wave, engine.top_logprobs([ask(*orders[n]) for n in wave])):
                answers[n] = answer
        swapped = answers[len(pairs) :]
        missing = {k for (k, _, _), a, b in zip(pairs, answers, swapped) if unanswered(a) or unanswered(b)}
        verdicts: list[dict] = [{} for _ in items]
        for (k, i, j), first, second in zip(pairs, answers, swapped):
            (p_a, why_a), (p_b, why_b) = _p_first(first), _p_first(second)
            p_b = None if p_b is None else 1.0 - p_b
            why = why_a or why_b
            ids = items[k].candidate_ids
            verdicts[k][(ids[i], ids[j])] = (outcome(p_a, p_b), p_a, p_b, {"reason": why} if why else {})
        return [
            None if k in missing else rank_outcomes(item.candidate_ids, verdicts[k], config.aggregate)
            for k, item in enumerate(items)
        ]

    return judge
