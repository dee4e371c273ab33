"""What names a judge run: the settings it reads and the hash of its prompt text (`identity`).

The same identity is the same AI annotator and run id (`base.JudgeRun`), so a
judge re-run with it keeps every ranking it wrote; settings that change only its
speed are left out, and some are stored under the names they had before.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from preflab.labelling.judges import prompts, score
from preflab.labelling.judges.criteria import CRITERION_KEYS, CriterionConfig
from preflab.labelling.judges.table import JUDGES

# Settings that change how fast a judge runs, not what it decides: not part of its identity.
SPEED_ONLY = {"batch_size"}
# Settings stored under the name they had before the config took its field from SamplingConfig,
# so a judge keeps its run id (and the rankings it wrote) across that change.
STORED_NAMES = {"n": "samples"}


def identity(kind: str, config) -> dict:
    """The configuration that names a judge: the settings it reads and the hash of its prompt text.

    An expected-score judge's prompt includes the answer start it reads the score after. A judge asked about
    a criterion other than `overall` is named by it and its rubric's hash too (`CriterionConfig.identity`);
    one asked `overall` keeps the identity it had before criteria.
    """
    graded = isinstance(config, score.ScoreConfig)
    skip = SPEED_ONLY | (config.unused() if graded else set()) | {"criterion", "criteria_file", "criteria"}
    out = {STORED_NAMES.get(k, k): v for k, v in asdict(config).items() if k not in skip}
    for added in ("head", "combine"):  # a reward model's heads, where it has several: named only when read
        if out.get(added, "") is None:
            del out[added]
    text = JUDGES[kind].prompt
    if text is not None:
        text += prompts.ANSWER_START if graded and config.method == "expected" else ""
        out["prompt_sha256"] = hashlib.sha256(text.encode()).hexdigest()[:16]
    if isinstance(config, CriterionConfig):
        out.update(config.identity())
    return out


# What names one run of a judge apart from the same judge asked about another criterion: the criterion's part
# (`CRITERION_KEYS`), the prompt's hash (a rubric's, or every criterion's at once: `asked_with`) and the run's id;
# and what is stored beside its identity, not part of it (its engine's stats, `record_stats`).
NOT_THE_JUDGE = CRITERION_KEYS | {"run_id", "prompt_sha256", "asked_with", "engine"}


def same_judge(judge_kind: str | None, model: str | None, config: dict | None) -> str | None:
    """What the AI annotators of one judge asked about several criteria and overall share (each criterion's rankings
    are an annotator of their own, `ensure_judge`): its kind, model and settings, as a key. None for an AI annotator
    that is no judge run (rankings imported under a name: no run id)."""
    if judge_kind is None or "run_id" not in (config or {}):
        return None
    settings = {k: v for k, v in (config or {}).items() if k not in NOT_THE_JUDGE}
    blob = json.dumps({"kind": judge_kind, "model": model, "settings": settings}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
