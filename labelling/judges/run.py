"""Running a judge of any kind over the stored candidates."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import asdict

from preflab.labelling.judges import likelihood, pairwise, prompts, reward_model, score
from preflab.labelling.judges.base import JudgeRun, JudgeSummary, run_judge

CONFIGS = {
    "pairwise": pairwise.PairwiseConfig,
    "score": score.ScoreConfig,
    "reference": score.ScoreConfig,
    "reward-model": reward_model.RewardModelConfig,
    "likelihood": likelihood.LikelihoodConfig,
}
_PROMPTS = {
    "pairwise": prompts.PAIRWISE_SYSTEM + prompts.PAIRWISE_USER,
    "score": prompts.SCORE_PROMPT,
    "reference": prompts.REFERENCE_PROMPT,
}
# Settings that change how fast a judge runs, not what it decides: not part of its identity.
SPEED_ONLY = {"batch_size"}


def identity(kind: str, config) -> dict:
    """The configuration that names a judge: its settings and the hash of its prompt text."""
    out = {k: v for k, v in asdict(config).items() if k not in SPEED_ONLY}
    if kind in _PROMPTS:
        out["prompt_sha256"] = hashlib.sha256(_PROMPTS[kind].encode()).hexdigest()[:16]
    return out


def make_judge(kind: str, model, tokenizer, config):
    if kind == "pairwise":
        return pairwise.make_judge(model, tokenizer, config)
    if kind in ("score", "reference"):
        return score.make_judge(model, tokenizer, config, with_reference=kind == "reference")
    if kind == "reward-model":
        return reward_model.make_judge(model, tokenizer, config)
    return likelihood.make_judge(model, tokenizer, config)


def judge_candidates(sessions, kind: str, model, tokenizer, model_name: str, config,
                     prompt_ids: list[int] | None = None, candidate_model: str | None = None,
                     progress: Callable[[int], None] | None = None,
                     on_total: Callable[[int], None] | None = None) -> JudgeSummary:
    """Rank the candidates of every prompt this judge has not ranked yet.

    Args:
        sessions: a session factory; rankings are written a batch of prompts per transaction.
        kind: one of `JUDGE_KINDS`.
        model, tokenizer: the loaded judge model (a causal LM, or a sequence classifier
            for `reward-model`).
        model_name: the judge model's label, stored on the annotator.
        config: the kind's config dataclass (`CONFIGS[kind]`).
        candidate_model: judge only the candidates this model generated.
    """
    run = JudgeRun(kind, model_name, identity(kind, config))
    return run_judge(sessions, run, make_judge(kind, model, tokenizer, config), prompt_ids, candidate_model,
                     require_reference=kind == "reference", progress=progress, on_total=on_total)
