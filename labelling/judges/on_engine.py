"""The judges that read a causal LM, on an engine (`preflab.lm.engines`): a server means what the process means.

The same prompts as in process, sent as messages (the server applies the chat template):

- pairwise: each pair in both orders; the verdict is read from its first token's alternatives,
  P("A") / (P("A") + P("B")), held to those two letters where the server offers structured output.
- score and reference, expected: the answer is started with "Score: " and the score read from
  the score token's alternatives, the probability-weighted mean of 0-5 (`score.expected_score`);
  sampled: k sampled replies, each "Score: n" parsed, as in process.
- likelihood: the server's log-probabilities of each reply's own tokens given its whole history: the tokens
  scored in process (`preflab.lm.replies`), read by token id.

A reply that names no choice cannot be read: the pair, or the candidate, is an abstention
(`abstain` in its details, counted by `preflab judge report`), never a guess. An item the server
refused for itself (over the context length) is an abstention with the server's reason. An ask
left unanswered after every retry leaves its prompt unranked (None), so the next run asks again
(only what is missing: the answers are stored).

In process, `make_judge` keeps the judges' own forward passes (`forward.py`: the shared prefix
run once), faster than any general engine call.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations
from math import exp

from preflab.db.conversation import assistant_turn
from preflab.labelling.judges import pairwise, score
from preflab.labelling.judges.base import Judgement
from preflab.labelling.judges.prompts import ANSWER_START, parse_score
from preflab.labelling.selection import PromptCandidates
from preflab.lm.engines import Failed, Generate, Likelihood, Logprobs, Sampling

VERDICT = ("A", "B")
# A server that holds no verdict to its choices may write a word or two first: the letter is read further in.
VERDICT_TOKENS = 4
SCORE_CHOICES = tuple(str(value) for value in score.SCORES)

JudgeFn = Callable[[list[PromptCandidates]], list[Judgement | None]]


def engine_judge(kind: str, engine, config) -> JudgeFn:
    """The judge function of `kind` on `engine`: a batch of prompts in, a judgement (or None: ask again) each."""
    if kind == "pairwise":
        return pairwise_judge(engine, config)
    if kind in ("score", "reference"):
        grade = expected_judge if config.method == "expected" else sampled_judge
        return grade(engine, config, with_reference=kind == "reference")
    if kind == "likelihood":
        return likelihood_judge(engine)
    raise ValueError(f"the {kind} judge reads no causal LM")


def _unanswered(answer) -> bool:
    """No answer after every retry: the prompt is left for the next run (a quarantined item is an answer)."""
    return isinstance(answer, Failed) and not answer.quarantined


def _read(answer, choices: tuple[str, ...]) -> tuple[dict[str, float] | None, str | None]:
    """(log p of each choice, None), or (None, why it cannot be read)."""
    if isinstance(answer, Failed):
        return None, answer.reason
    read = answer.choice_logprobs(choices)
    if read is None or all(v == float("-inf") for v in read.values()):
        return None, f"no {' or '.join(choices[:6])} in the reply: {answer.text[:200]!r}"
    return read, None


def _p_first(answer) -> tuple[float | None, str | None]:
    read, why = _read(answer, VERDICT)
    if read is None:
        return None, why
    la, lb = read["A"], read["B"]
    if la == float("-inf"):
        return 0.0, None
    return 1.0 / (1.0 + exp(lb - la)) if lb != float("-inf") else 1.0, None


def prefix_waves(orders: list[tuple[int, int, int]]) -> tuple[list[int], list[int]]:
    """The asks (prompt, reply shown first, reply shown second) in two waves, by index: first one ask for each
    prompt and reply shown first, then the rest.

    A judge prompt is the rubric, the question, the reply shown first, then the other. Asked at once, asks that
    share all but the last reply are read side by side, each from the start; in a second wave, a server with a
    prefix cache (vLLM's is on by default) reads them from the first wave's, as the judge in process reads its
    rubric once. With 4 replies, 8 of a prompt's 12 asks then read only the last reply.
    """
    leads: dict[tuple[int, int], int] = {}
    for n, (k, first, _) in enumerate(orders):
        leads.setdefault((k, first), n)
    first_wave = sorted(leads.values())
    led = set(first_wave)
    return first_wave, [n for n in range(len(orders)) if n not in led]


def pairwise_judge(engine, config: pairwise.PairwiseConfig) -> JudgeFn:
    def judge(items: list[PromptCandidates]) -> list[Judgement | None]:
        pairs = [(k, i, j) for k, item in enumerate(items) for i, j in combinations(range(len(item.texts)), 2)]

        def ask(k: int, first: int, second: int) -> Logprobs:
            return Logprobs(
                pairwise.judge_messages(items[k].history, items[k].texts[first], items[k].texts[second]),
                choices=VERDICT,
                max_tokens=VERDICT_TOKENS,
            )

        # All first orders, then all swapped orders, as in process; asked in two waves (`prefix_waves`).
        orders = [(k, i, j) for k, i, j in pairs] + [(k, j, i) for k, i, j in pairs]
        answers: list = [None] * len(orders)
        for wave in prefix_waves(orders):
            for n, answer in zip(wave, engine.top_logprobs([ask(*orders[n]) for n in wave])):
                answers[n] = answer
        missing = {
            k for (k, _, _), a, b in zip(pairs, answers, answers[len(pairs) :]) if _unanswered(a) or _unanswered(b)
        }
        verdicts: list[dict] = [{} for _ in items]
        for (k, i, j), first, swapped in zip(pairs, answers, answers[len(pairs) :]):
            (p_a, why_a), (p_b, why_b) = _p_first(first), _p_first(swapped)
            p_b = None if p_b is None else 1.0 - p_b
            why = why_a or why_b
            ids = items[k].candidate_ids
            verdicts[k][(ids[i], ids[j])] = (pairwise.outcome(p_a, p_b), p_a, p_b, {"reason": why} if why else {})
        return [
            None if k in missing else pairwise.rank_outcomes(item.candidate_ids, verdicts[k], config.aggregate)
            for k, item in enumerate(items)
        ]

    return judge


def expected_judge(engine, config: score.ScoreConfig, with_reference: bool = False) -> JudgeFn:
    variants = [[n] for n in range(len(SCORE_CHOICES))]

    def judge(items: list[PromptCandidates]) -> list[Judgement | None]:
        asks = [
            Logprobs(
                score.grading_messages(item, response, with_reference), answer_start=ANSWER_START, choices=SCORE_CHOICES
            )
            for item in items
            for response in item.texts
        ]
        answers = iter(engine.top_logprobs(asks))
        out: list[Judgement | None] = []
        for item in items:
            scores, details, missing = {}, {}, False
            for cid in item.candidate_ids:
                answer = next(answers)
                missing = missing or _unanswered(answer)
                read, why = _read(answer, SCORE_CHOICES)
                if read is None:
                    scores[cid], details[cid] = None, {"abstain": True, "reason": why}
                else:
                    scores[cid], details[cid] = score.expected_score([read[c] for c in SCORE_CHOICES], variants)
            out.append(None if missing else (scores, details))
        return out

    return judge


def sampled_judge(engine, config: score.ScoreConfig, with_reference: bool = False) -> JudgeFn:
    """k sampled grades per response; a reply without a score is asked again (the next sample's index)."""
    sampling = Sampling(config.max_new_tokens, config.temperature, config.top_p, config.seed)

    def judge(items: list[PromptCandidates]) -> list[Judgement | None]:
        keys = [(k, cid) for k, item in enumerate(items) for cid in item.candidate_ids]
        messages = {
            (k, cid): score.grading_messages(items[k], text, with_reference)
            for k, item in enumerate(items)
            for cid, text in zip(item.candidate_ids, item.texts)
        }
        got: dict = {key: [] for key in keys}
        failed: dict = {key: [] for key in keys}
        missing: set[int] = set()
        for _ in range(config.retries + 1):
            wanted = [
                (key, len(got[key]) + len(failed[key]) + n)
                for key in keys
                if key[0] not in missing
                for n in range(config.n - len(got[key]))
            ]
            if not wanted:
                break
            replies = engine.generate([Generate(messages[key], sampling, index) for key, index in wanted])
            for (key, _), reply in zip(wanted, replies):
                if _unanswered(reply):
                    missing.add(key[0])
                    continue
                value = None if isinstance(reply, Failed) else parse_score(reply.text)
                (failed[key] if value is None else got[key]).append(
                    reply.reason if isinstance(reply, Failed) else reply.text if value is None else value
                )
        out: list[Judgement | None] = []
        for k, item in enumerate(items):
            if k in missing:
                out.append(None)
                continue
            mean = {c: (sum(got[k, c]) / len(got[k, c]) if got[k, c] else None) for c in item.candidate_ids}
            details = {
                c: {
                    "samples": got[k, c],
                    "attempts": len(got[k, c]) + len(failed[k, c]),
                    "parse_failures": len(failed[k, c]),
                    "failed_replies": [r[:300] for r in failed[k, c][: score.KEEP_FAILED_REPLIES]],
                }
                for c in item.candidate_ids
            }
            out.append((mean, details))
        return out

    return judge


def likelihood_judge(engine) -> JudgeFn:
    """Each reply's mean token log-probability given its history; a reply of several turns on its assistant turns,
    each given everything before it (as `likelihood.mean_logprobs` in process)."""

    def judge(items: list[PromptCandidates]) -> list[Judgement | None]:
        asks, owner = [], []
        for k, item in enumerate(items):
            for n, cid in enumerate(item.candidate_ids):
                response = item.reply(n)
                turns = assistant_turn(response) if isinstance(response, str) else list(response)
                for at, turn in enumerate(turns):
                    if turn["role"] == "assistant":
                        asks.append(Likelihood(list(item.history) + turns[:at], turn["content"]))
                        owner.append((k, cid))
        sums: dict = {(k, cid): [0.0, 0, None] for k, item in enumerate(items) for cid in item.candidate_ids}
        missing = set()
        for (k, cid), answer in zip(owner, engine.likelihood(asks)):
            if isinstance(answer, Failed):
                missing.update({k} if not answer.quarantined else set())
                sums[k, cid][2] = answer.reason
                continue
            sums[k, cid][0] += answer.total
            sums[k, cid][1] += answer.tokens
        out: list[Judgement | None] = []
        for k, item in enumerate(items):
            scores, details = {}, {}
            for cid in item.candidate_ids:
                total, n, why = sums[k, cid]
                if why is not None:
                    scores[cid], details[cid] = None, {"abstain": True, "reason": why}
                    continue
                mean = total / n if n else float("-inf")
                scores[cid] = round(mean, 6) if n else None
                details[cid] = {"tokens": n, "sum_logprob": round(mean * n, 4) if n else None}
            out.append(None if k in missing else (scores, details))
        return out

    return judge
