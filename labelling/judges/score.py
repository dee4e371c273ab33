"""Single-answer grading on the additive 5-point prompt, by one of two methods.

- `sampled`: k replies are sampled and their "Score: <n>" (0–5) averaged. A reply
  without a parseable score is a parse failure: it is recorded in the
  candidate's details and asked again, never counted as 0. A candidate with no
  parseable reply after every retry stays unranked.
- `expected` (in the spirit of G-Eval): the assistant's answer is started with
  "Score: " and the next-token probabilities of the score tokens 0–5 are read
  from one forward pass; the score is their probability-weighted mean. It always
  yields a score; the probability mass the score tokens take is stored, and a low
  mass means the judge is guessing (`preflab judge report` says so).

The `reference` judge is the same with the prompt's reference answer in the prompt.
A prompt that is a conversation is shown whole, as its transcript, and the response
graded as the reply to its last user message (`prompts.SCORE_CONVERSATION_PROMPT`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass, field, fields

from preflab.db.conversation import is_multi_turn, transcript
from preflab.errors import ConfigError
from preflab.labelling.judges.base import Judgement
from preflab.labelling.judges.prompts import (
    ANSWER_START,
    REFERENCE_CONVERSATION_PROMPT,
    REFERENCE_PROMPT,
    SCORE_CONVERSATION_PROMPT,
    SCORE_PROMPT,
    parse_score,
)
from preflab.labelling.selection import PromptCandidates
from preflab.lm.sampling import SamplingConfig

KEEP_FAILED_REPLIES = 3
SCORE_METHODS = ("sampled", "expected")
SCORES = tuple(range(6))
# The fields only the sampled method reads: they do not name an expected judge.
SAMPLING_ONLY = ("n", "temperature", "top_p", "max_new_tokens", "seed", "retries")


@dataclass
class ScoreConfig(SamplingConfig):
    """How the score and reference judges grade a response.

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

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.retries < 0:
            raise ConfigError("--retries cannot be negative")
        if self.batch_size < 1:
            raise ConfigError("--batch-size must be at least 1")
        if self.method not in SCORE_METHODS:
            raise ConfigError(f"--method must be one of {', '.join(SCORE_METHODS)}, got {self.method!r}")

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


def grading_text(tokenizer, item: PromptCandidates, response: str, with_reference: bool) -> str:
    """The grader's prompt for one response, in the judge model's chat format."""
    from preflab.lm.loading import chat_prompt

    return chat_prompt(tokenizer, grading_messages(item, response, with_reference))


def grading_messages(item: PromptCandidates, response: str, with_reference: bool) -> list[dict[str, str]]:
    """The grader's one user message: the user's question, or the whole conversation, then the response."""
    turns = item.history
    if is_multi_turn(turns):
        shown = {"conversation": transcript(turns), "response": response}
        template = REFERENCE_CONVERSATION_PROMPT if with_reference else SCORE_CONVERSATION_PROMPT
    else:
        shown = {"question": turns[0]["content"], "response": response}
        template = REFERENCE_PROMPT if with_reference else SCORE_PROMPT
    text = template.format(**shown, **({"reference": item.reference} if with_reference else {}))
    return [{"role": "user", "content": text}]


def _seed(base: int, round_: int, keys: list[int]) -> int:
    digest = hashlib.sha256(f"{base}:{round_}:{keys}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def make_judge(model, tokenizer, config: ScoreConfig, with_reference: bool = False):
    """A function from a batch of prompts to their judgements, by `config.method`."""
    if config.method == "expected":
        return expected_judge(model, tokenizer, config, with_reference)
    return sampled_judge(model, tokenizer, config, with_reference)


def sampled_judge(model, tokenizer, config: ScoreConfig, with_reference: bool = False):
    """A function from a batch of prompts to their judgements (mean sampled score per candidate)."""
    from preflab.lm.sampling import generate_texts

    def judge(items: list[PromptCandidates]) -> list[Judgement]:
        # Keyed by (item, candidate): callers such as `train eval` number every item's candidates 0, 1.
        texts: dict[tuple[int, int], str] = {}
        for k, item in enumerate(items):
            for cid, response in zip(item.candidate_ids, item.texts):
                texts[k, cid] = grading_text(tokenizer, item, response, with_reference)
        scores: dict[tuple[int, int], list[float]] = {key: [] for key in texts}
        failures: dict[tuple[int, int], list[str]] = {key: [] for key in texts}
        for round_ in range(config.retries + 1):
            wanted = [key for key in texts for _ in range(config.n - len(scores[key]))]
            if not wanted:
                break
            for start in range(0, len(wanted), config.batch_size):
                part = wanted[start : start + config.batch_size]
                replies = generate_texts(
                    model,
                    tokenizer,
                    [texts[c] for c in part],
                    max_new_tokens=config.max_new_tokens,
                    temperature=config.temperature,
                    top_p=config.top_p,
                    seed=_seed(config.seed, round_, [c for _, c in part]),
                )
                for key, reply in zip(part, replies):
                    value = parse_score(reply.text)
                    if value is None:
                        failures[key].append(reply.text)
                    else:
                        scores[key].append(value)
        out = []
        for k, item in enumerate(items):
            got = {c: scores[k, c] for c in item.candidate_ids}
            mean = {c: (sum(got[c]) / len(got[c]) if got[c] else None) for c in item.candidate_ids}
            details = {
                c: {
                    "samples": got[c],
                    "attempts": len(got[c]) + len(failures[k, c]),
                    "parse_failures": len(failures[k, c]),
                    "failed_replies": [r[:300] for r in failures[k, c][:KEEP_FAILED_REPLIES]],
                }
                for c in item.candidate_ids
            }
            out.append((mean, details))
        return out

    return judge


def score_tokens(tokenizer) -> tuple[list[int], list[list[int]]]:
    """(the answer's start, the token ids that spell each score 0–5 right after it).

    The start is what "Score: 0" … "Score: 5" share as this tokenizer spells them:
    `Score`, `:` and a lone space where digits stand apart (SmolLM2), or only
    `Score`, `:` where the space joins the digit (" 5" is one token). A score's
    spellings are the token that follows there plus the single tokens "5" and
    " 5" where they exist, so a model that writes the digit with or without a
    space counts the same; their probabilities are summed.
    """

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    spelled = [encode(f"{ANSWER_START.rstrip()} {value}") for value in SCORES]
    shared = 0
    while all(len(ids) > shared and ids[shared] == spelled[0][shared] for ids in spelled):
        shared += 1
    variants: list[list[int]] = []
    for value, ids in zip(SCORES, spelled):
        options = [ids[shared]] if len(ids) == shared + 1 else []
        for spelling in (str(value), f" {value}"):
            single = encode(spelling)
            if len(single) == 1 and single[0] not in options:
                options.append(single[0])
        if not options:
            raise ConfigError(f"the judge's tokenizer has no single token for the score {value}")
        variants.append(options)
    flat = [i for options in variants for i in options]
    if len(flat) != len(set(flat)):
        raise ConfigError("the judge's tokenizer spells two scores with the same token")
    return spelled[0][:shared], variants


def expected_score(logprobs: list[float], variants: list[list[int]]) -> tuple[float, dict]:
    """(the probability-weighted mean score, its details) from the next-token log-probabilities.

    Args:
        logprobs: log p of each token of `variants`, flattened in order.
        variants: per score 0–5, the token ids that spell it.

    Returns:
        The score is the mean over the mass the score tokens take (so it always
        exists); details hold that mass and each score's share of it.
    """
    import math

    from preflab.lm.forward import logsumexp

    values, at = [], 0
    for options in variants:
        values.append(logsumexp(logprobs[at : at + len(options)]))
        at += len(options)
    total = logsumexp(values)
    shares = [math.exp(v - total) for v in values]
    score = sum(s * p for s, p in zip(SCORES, shares))
    return score, {"mass": round(math.exp(total), 6), "probs": [round(p, 4) for p in shares]}


def expected_judge(model, tokenizer, config: ScoreConfig, with_reference: bool = False):
    """A function from a batch of prompts to their judgements (expected score per candidate)."""
    from preflab.lm.forward import next_token_logprobs

    start, variants = score_tokens(tokenizer)
    wanted = [i for options in variants for i in options]

    def judge(items: list[PromptCandidates]) -> list[Judgement]:
        texts = [grading_text(tokenizer, item, response, with_reference) for item in items for response in item.texts]
        graded = iter(
            expected_score(row, variants)
            for row in next_token_logprobs(model, tokenizer, texts, wanted, config.batch_size, then=start)
        )
        out = []
        for item in items:
            results = {c: next(graded) for c in item.candidate_ids}
            out.append(({c: r[0] for c, r in results.items()}, {c: r[1] for c, r in results.items()}))
        return out

    return judge
