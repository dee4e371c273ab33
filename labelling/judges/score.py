"""Single-answer grading on the additive 5-point prompt, by one of two methods, on an engine.

- `sampled`: k replies are sampled and their "Score: <n>" (0–5) averaged. A reply
  without a parseable score is a parse failure: it is recorded in the
  candidate's details and asked again, never counted as 0. A candidate with no
  parseable reply after every retry stays unranked.
- `expected` (in the spirit of G-Eval): the assistant's answer is started with
  "Score: " and the probabilities of the score tokens 0–5 as its next token are
  read (in process, from one forward pass); the score is their probability-weighted
  mean. It yields a score wherever they can be read; the probability mass the score
  tokens take is stored, and a low mass means the judge is guessing (`preflab judge
  report` says so). A reply that names no score is an abstention.

The `reference` judge is the same with the prompt's reference answer in the prompt.
A prompt that is a conversation is shown whole, as its transcript, and the response
graded as the reply to its last user message (`prompts.SCORE_CONVERSATION_PROMPT`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, fields

from preflab.db.conversation import is_multi_turn, transcript
from preflab.db.models import OVERALL
from preflab.db.store import chunks
from preflab.errors import ConfigError
from preflab.labelling.judges.base import Judgement, read_choices, unanswered
from preflab.labelling.judges.criteria import CriterionConfig, score_prompt
from preflab.labelling.judges.prompts import (
    ANSWER_START,
    REFERENCE_CONVERSATION_PROMPT,
    REFERENCE_PROMPT,
    SCORE_CONVERSATION_PROMPT,
    SCORE_PROMPT,
    parse_score,
)
from preflab.labelling.selection import PromptCandidates
from preflab.lm.engines import Engine, Failed, Generate, Logprobs, Sampling
from preflab.lm.forward import logsumexp
from preflab.lm.sampling import SamplingConfig

KEEP_FAILED_REPLIES = 3
JudgeFn = Callable[[list[PromptCandidates]], list[Judgement | None]]
SCORE_METHODS = ("sampled", "expected")
SCORES = tuple(range(6))
SCORE_CHOICES = tuple(str(value) for value in SCORES)
# The fields only the sampled method reads: they do not name an expected judge.
SAMPLING_ONLY = ("n", "temperature", "top_p", "max_new_tokens", "seed", "retries")


@dataclass
class ScoreConfig(SamplingConfig, CriterionConfig):
    """How the score and reference judges grade a response, and by which criterion (`CriterionConfig`).

    `n` (`--samples`) is how many grades the sampled method samples and averages
    per response; the shorter default reply fits a justification and a score.
    The expected method samples nothing: it reads none of the sampling fields, and
    `preflab judge` refuses them when given with it (`refuse_unread`).
    """

    n: int = field(
        default=3, metadata={"help": "sampled: scores sampled and averaged per response.", "flags": ("--samples",)}
    )
    max_new_tokens: int = field(default=192, metadata={"help": "sampled: longest judge reply (justification + score)."})
    retries: int = field(default=2, metadata={"help": "sampled: extra rounds for replies without a parseable score."})
    batch_size: int = field(
        default=8, metadata={"help": "Judge prompts per batch (sampled replies or forward passes)."}
    )
    method: str = field(
        default="sampled",
        metadata={
            "help": 'sampled: sample k replies and average their "Score: n"; expected: start the answer with '
            '"Score: " and take the probability-weighted mean of the tokens 0-5 from one forward pass '
            "(always yields a score; takes no sampling option).",
            "choices": SCORE_METHODS,
        },
    )
    criteria: str | None = field(
        default=None,
        metadata={
            "help": "Judge by several criteria (comma-separated, as --criterion names one): on a server that holds "
            "replies to a JSON schema, with --method sampled, one request per response returns every criterion's "
            "score as a JSON object; elsewhere one ask per criterion. Each criterion's rankings carry it."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        CriterionConfig.__post_init__(self)
        if self.retries < 0:
            raise ConfigError("--retries cannot be negative")
        if self.batch_size < 1:
            raise ConfigError("--batch-size must be at least 1")
        if self.method not in SCORE_METHODS:
            raise ConfigError(f"--method must be one of {', '.join(SCORE_METHODS)}, got {self.method!r}")
        for name in self.names():
            CriterionConfig(name, self.criteria_file)  # each has a rubric, or one sentence says which does not
        if self.criteria is not None and self.criterion != OVERALL:
            raise ConfigError("give --criterion for one criterion or --criteria for several, not both")

    def names(self) -> list[str]:
        """The criteria of `--criteria`, in the order given, each once (none: judged by `criterion` alone)."""
        return list(dict.fromkeys(n.strip() for n in (self.criteria or "").split(",") if n.strip()))

    def unused(self) -> set[str]:
        """Fields left out of the judge's identity: those the method does not read.

        The sampled method's identity leaves out `method` itself, so sampled judges
        from before the field existed keep their run ids (and their rankings).
        """
        return set(SAMPLING_ONLY) if self.method == "expected" else {"method"}


def refuse_unread(config: ScoreConfig, given: Collection[str]) -> None:
    """Refuse the sampling options given with `--method expected`, which would silently do nothing.

    Args:
        given: the names of the fields set on the command line (not left at their defaults).
    """
    unread = [f for f in fields(config) if f.name in given and f.name in SAMPLING_ONLY]
    if config.method == "expected" and unread:
        flags = ", ".join(f.metadata.get("flags", ("--" + f.name.replace("_", "-"),))[0] for f in unread)
        them = "it" if len(unread) == 1 else "them"
        raise ConfigError(
            f"--method expected samples nothing, so it would ignore {flags}: leave {them} out or use --method sampled"
        )


def grading_text(
    tokenizer, item: PromptCandidates, response: str, with_reference: bool, criterion: CriterionConfig | None = None
) -> str:
    """The grader's prompt for one response, in the judge model's chat format."""
    from preflab.lm.loading import chat_prompt

    return chat_prompt(tokenizer, grading_messages(item, response, with_reference, criterion))


def grading_messages(
    item: PromptCandidates, response: str, with_reference: bool, criterion: CriterionConfig | None = None
) -> list[dict[str, str]]:
    """The grader's one user message: the user's question, or the whole conversation, then the response.

    `criterion`: the rubric the response is graded by (none, or `overall`: the prompt as it is).
    """
    turns = item.history
    if is_multi_turn(turns):
        shown = {"conversation": transcript(turns), "response": response}
        template = REFERENCE_CONVERSATION_PROMPT if with_reference else SCORE_CONVERSATION_PROMPT
    else:
        shown = {"question": turns[0]["content"], "response": response}
        template = REFERENCE_PROMPT if with_reference else SCORE_PROMPT
    if criterion is not None:
        template = score_prompt(template, criterion.criterion, criterion.rubric())
    text = template.format(**shown, **({"reference": item.reference} if with_reference else {}))
    return [{"role": "user", "content": text}]


def _seed(base: int, round_: int, keys: list[int]) -> int:
    digest = hashlib.sha256(f"{base}:{round_}:{keys}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def judge_on(engine: Engine, config: ScoreConfig, with_reference: bool = False) -> JudgeFn:
    """A function from a batch of prompts to their judgements on `engine`, by `config.method` (None: a prompt a
    server left unanswered, asked again by the next run)."""
    grade = expected_judge if config.method == "expected" else sampled_judge
    return grade(engine, config, with_reference)


def expected_score(logprobs: list[float], variants: list[list[int]]) -> tuple[float, dict]:
    """(the probability-weighted mean score, its details) from the next-token log-probabilities.

    Args:
        logprobs: log p of each token of `variants`, flattened in order.
        variants: per score 0–5, the token ids that spell it.

    Returns:
        The score is the mean over the mass the score tokens take (so it always
        exists); details hold that mass and each score's share of it.
    """
    values, at = [], 0
    for options in variants:
        values.append(logsumexp(logprobs[at : at + len(options)]))
        at += len(options)
    total = logsumexp(values)
    shares = [math.exp(v - total) for v in values]
    score = sum(s * p for s, p in zip(SCORES, shares))
    return score, {"mass": round(math.exp(total), 6), "probs": [round(p, 4) for p in shares]}


def expected_judge(engine: Engine, config: ScoreConfig, with_reference: bool = False) -> JudgeFn:
    """The expected score of each candidate: its answer started with "Score: " and held to the scores 0-5."""
    variants = [[n] for n in range(len(SCORE_CHOICES))]

    def judge(items: list[PromptCandidates]) -> list[Judgement | None]:
        asks = [
            Logprobs(
                grading_messages(item, response, with_reference, config),
                answer_start=ANSWER_START,
                choices=SCORE_CHOICES,
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
                missing = missing or unanswered(answer)
                read, why = read_choices(answer, SCORE_CHOICES)
                if read is None:
                    scores[cid], details[cid] = None, {"abstain": True, "reason": why}
                else:
                    scores[cid], details[cid] = expected_score([read[c] for c in SCORE_CHOICES], variants)
            out.append(None if missing else (scores, details))
        return out

    return judge


@dataclass(frozen=True)
class AskForm:
    """How the sampled judge asks for a grade and reads it: the messages, a JSON schema to hold the reply to
    (None: free text), and the reader of a reply's score (None: none in it)."""

    messages: Callable[[PromptCandidates, str], list[dict[str, str]]]
    schema: dict | None = None
    read: Callable[[str], float | None] = parse_score


def sampled_judge(
    engine: Engine, config: ScoreConfig, with_reference: bool = False, form: AskForm | None = None
) -> JudgeFn:
    """The mean of k sampled grades per candidate; a reply without a score is asked again (a further sample).

    Where answers are stored, each sample is its own ask, told apart by its index, so a re-run asks the same;
    elsewhere each batch of `config.batch_size` asks is drawn together from a seed of its round and candidates.
    `form`: how it asks and reads (default: the grading prompt, by `config`'s criterion, and "Score: <n>").
    """
    form = form or AskForm(lambda item, text: grading_messages(item, text, with_reference, config))

    def judge(items: list[PromptCandidates]) -> list[Judgement | None]:
        # Keyed by (item, candidate): callers such as `train eval` number every item's candidates 0, 1.
        keys = [(k, cid) for k, item in enumerate(items) for cid in item.candidate_ids]
        messages = {
            (k, cid): form.messages(items[k], text)
            for k, item in enumerate(items)
            for cid, text in zip(item.candidate_ids, item.texts)
        }
        got: dict = {key: [] for key in keys}
        failed: dict = {key: [] for key in keys}
        missing: set[int] = set()
        for round_ in range(config.retries + 1):
            wanted = [
                (key, len(got[key]) + len(failed[key]) + n)
                for key in keys
                if key[0] not in missing
                for n in range(config.n - len(got[key]))
            ]
            if not wanted:
                break
            if engine.stores_answers:  # each sample its own ask, told apart by its index: a re-run asks the same
                seeds = [config.seed] * len(wanted)
            else:  # a batch drawn together, from a seed fixed by its round and candidates
                parts = chunks(wanted, config.batch_size)
                seeds = [_seed(config.seed, round_, [cid for (_, cid), _ in part]) for part in parts for _ in part]
            asks = [
                Generate(messages[key], _sampling(config, seed), index, schema=form.schema)
                for (key, index), seed in zip(wanted, seeds)
            ]
            for (key, _), reply in zip(wanted, engine.generate(asks)):
                if unanswered(reply):
                    missing.add(key[0])
                    continue
                value = None if isinstance(reply, Failed) else form.read(reply.text)
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
                    "failed_replies": [r[:300] for r in failed[k, c][:KEEP_FAILED_REPLIES]],
                }
                for c in item.candidate_ids
            }
            out.append((mean, details))
        return out

    return judge


def _sampling(config: ScoreConfig, seed: int) -> Sampling:
    return Sampling(config.max_new_tokens, config.temperature, config.top_p, seed)
