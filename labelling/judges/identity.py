"""What names a judge run: the settings it reads and the hash of its prompt text (`identity`).

The same identity is the same AI annotator and run id (`base.JudgeRun`), so a
judge re-run with it keeps every ranking it wrote; settings that change only its
speed are left out, and some are stored under the names they had before.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict

from preflab.labelling.judges import prompts, score
from preflab.labelling.judges.criteria import CriterionConfig
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
