"""Single-answer grading: the additive 5-point prompt, sampled k times and averaged.

A reply without a parseable "Score: <n>" (0–5) is a parse failure: it is
recorded in the candidate's details and asked again, never counted as 0. A
candidate with no parseable reply after every retry stays unranked. The
`reference` judge is the same with the prompt's reference answer in the prompt.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from preflab.errors import ConfigError
from preflab.labelling.judges.base import Judgement
from preflab.labelling.judges.prompts import REFERENCE_PROMPT, SCORE_PROMPT, parse_score
from preflab.labelling.selection import PromptCandidates
from preflab.training.models.sampling import SamplingConfig

KEEP_FAILED_REPLIES = 3


@dataclass
class ScoreConfig(SamplingConfig):
    """How the score and reference judges sample their grades.

    `n` (`--samples`) is how many grades are sampled and averaged per response;
    the shorter default reply fits a justification and a score.
    """

    n: int = field(default=3, metadata={"help": "Scores sampled and averaged per response.",
                                        "flags": ("--samples",)})
    max_new_tokens: int = field(default=192, metadata={"help": "Longest judge reply (justification + score)."})
    retries: int = field(default=2, metadata={"help": "Extra rounds for replies without a parseable score."})
    batch_size: int = field(default=8, metadata={"help": "Judge replies sampled per batch."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.retries < 0:
            raise ConfigError("--retries cannot be negative")
        if self.batch_size < 1:
            raise ConfigError("--batch-size must be at least 1")


def grading_text(tokenizer, item: PromptCandidates, response: str, with_reference: bool) -> str:
    from preflab.training.models.loading import chat_text

    if with_reference:
        return chat_text(tokenizer, REFERENCE_PROMPT.format(question=item.prompt, reference=item.reference,
                                                            response=response))
    return chat_text(tokenizer, SCORE_PROMPT.format(question=item.prompt, response=response))


def _seed(base: int, round_: int, keys: list[int]) -> int:
    digest = hashlib.sha256(f"{base}:{round_}:{keys}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def make_judge(model, tokenizer, config: ScoreConfig, with_reference: bool = False):
    """A function from a batch of prompts to their judgements (mean sampled score per candidate)."""
    from preflab.training.models.sampling import generate_texts

    def judge(items: list[PromptCandidates]) -> list[Judgement]:
        texts: dict[int, str] = {}
        for item in items:
            for cid, response in zip(item.candidate_ids, item.texts):
                texts[cid] = grading_text(tokenizer, item, response, with_reference)
        scores: dict[int, list[float]] = {cid: [] for cid in texts}
        failures: dict[int, list[str]] = {cid: [] for cid in texts}
        for round_ in range(config.retries + 1):
            wanted = [cid for cid in texts for _ in range(config.n - len(scores[cid]))]
            if not wanted:
                break
            for start in range(0, len(wanted), config.batch_size):
                part = wanted[start:start + config.batch_size]
                replies = generate_texts(model, tokenizer, [texts[c] for c in part],
                                         max_new_tokens=config.max_new_tokens, temperature=config.temperature,
                                         top_p=config.top_p, seed=_seed(config.seed, round_, part))
                for cid, reply in zip(part, replies):
                    value = parse_score(reply.text)
                    if value is None:
                        failures[cid].append(reply.text)
                    else:
                        scores[cid].append(value)
        out = []
        for item in items:
            mean = {c: (sum(scores[c]) / len(scores[c]) if scores[c] else None) for c in item.candidate_ids}
            details = {c: {"samples": scores[c], "attempts": len(scores[c]) + len(failures[c]),
                           "parse_failures": len(failures[c]),
                           "failed_replies": [r[:300] for r in failures[c][:KEEP_FAILED_REPLIES]]}
                       for c in item.candidate_ids}
            out.append((mean, details))
        return out

    return judge
