"""Which judge to trust: each AI judge against the people, on the prompts both ranked.

Per judge: pairwise agreement with people and a bootstrap 95% interval around
it, Kendall tau-b, and position bias. The interval resamples the shared prompts,
not the pairs: the pairs of one prompt come from the same two rankings and are
not independent, so a bootstrap over pairs would claim too narrow an interval
(a cluster bootstrap). Position bias is, for judges that see two replies at
once, the share of pairs whose verdict followed the position rather than the
replies: the reply shown first won in both orders, or the one shown second did
(1 − swap consistency, but for verdicts of exactly 0.5). A judge that scores each
reply alone cannot be swayed by position: its position bias is None.

Every AI annotator is a judge here, those whose rankings were imported too
(GPT-4's ratings in UltraFeedback, kind "import"): compared with people on the
prompts both ranked, like the judges preflab ran. One that shares no prompt with
people is listed, with no agreement (shared_prompts 0). Imported rankings keep no
verdicts in both orders, so their position bias is None too ("imported": True says why).
Each judge is named by its name (`judge`: `judge:pairwise:<run>:openai:judge-b` for a judge preflab ran,
`openbmb/UltraFeedback` for an import), the name `ls predict --judge` and `serve --judge` take:
pseudonyms protect people, and a judge is none. Its stored pseudonym (`pseudonym`) is the one exports use.

The measures are `judge_report`'s (`preflab.labelling.judges.report`); the rows
come ordered by which judge to trust first: the lower bound of the interval,
highest first; judges with no interval (no pair ranked strictly by both them
and people, or such pairs on fewer than five prompts: too few to resample) last.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from preflab.db.models import OVERALL
from preflab.db.quality.agreement import chosen_criteria
from preflab.db.quality.intervals import LEVEL, MIN_PROMPTS, Resampler, interval
from preflab.labelling.judges.report import judge_report

ROUNDS = 1000


def agreement_interval(
    counts: list[list[int]], rounds: int = ROUNDS, seed: int = 0, level: float = LEVEL
) -> tuple[float, float] | None:
    """The percentile bootstrap interval of pairwise agreement, resampling prompts.

    Args:
        counts: one [shared pairs, agreeing pairs] per prompt (prompts with no shared pair left out).
        rounds: bootstrap resamples.
        seed: the seed of the resampling (the same counts and seed give the same interval).
        level: the interval's coverage (0.95: the 2.5% and 97.5% quantiles).

    Returns:
        (low, high), or None where fewer than MIN_PROMPTS prompts have a shared pair (a judge that
        agreed on the pairs of one prompt would otherwise get [1, 1] and be listed first).
    """
    table = np.asarray(counts, dtype=float).reshape(-1, 2)
    table = table[table[:, 0] > 0]
    if len(table) < MIN_PROMPTS:
        return None
    resampler = Resampler.over_prompts(len(table), rounds, seed, level)
    low, high = interval(resampler.ratios(table[:, 1:], table[:, :1])[:, 0], level)
    return None if low is None else (low, high)


def _order(row: dict[str, Any]) -> tuple:
    shared = row["agreement_low"] is not None
    return (
        row["criterion"],
        not shared,
        -(row["agreement_low"] or 0.0),
        -(row["agreement"] or 0.0),
        -row["shared_pairs"],
        row["annotator_id"],
    )


def trust_rows(
    report: list[dict[str, Any]], rounds: int = ROUNDS, seed: int = 0, level: float = LEVEL
) -> list[dict[str, Any]]:
    """The "which judge should I trust" rows from `judge_report(session, per_prompt=True, imported=True)`, best first.

    One row per judge and criterion, each criterion's rows together (in name order). Judges that ranked
    nothing are left out. Every judge's interval is drawn with the same seed.
    """
    rows = []
    for judge in report:
        if not judge["rankings"]:
            continue
        human = judge["human_agreement"]
        bounds = agreement_interval(human.get("per_prompt", []), rounds, seed, level)
        low, high = bounds or (None, None)
        rows.append(
            {
                "judge": judge["judge"],
                "name": judge["judge"],
                "pseudonym": judge["pseudonym"],
                "annotator_id": judge["annotator_id"],
                "criterion": judge.get("criterion", OVERALL),
                "kind": judge["kind"],
                "imported": judge["imported"],
                "method": judge.get("method"),
                "model": judge["model"],
                "run_id": judge.get("run_id"),
                "source": judge["source"],
                "rankings": judge["rankings"],
                "shared_prompts": human["prompts"],
                "shared_pairs": human["shared_pairs"],
                "agreement": human["pairwise_agreement"],
                "agreement_low": low,
                "agreement_high": high,
                "kendall_tau": human["kendall_tau"],
                "position_bias": judge["position_bias"],
                "position_first": judge["position_first"],
                "position_second": judge["position_second"],
                "pairs_judged": judge["pairs_judged"],
                # What it costs beside how far to trust it: the cheapest judge one can trust.
                "cost_per_1000_pairs": judge.get("cost_per_1000_pairs"),
                "pairs_per_s": judge.get("pairs_per_s"),
                "abstentions": judge.get("abstentions", 0),
            }
        )
    return sorted(rows, key=_order)


def judge_trust(
    session: Session, rounds: int = ROUNDS, seed: int = 0, level: float = LEVEL, criterion: str | None = None
) -> dict[str, Any]:
    """`preflab stats --judges`: the judges, best first within each criterion (`criterion`'s alone, if given),
    and how the intervals were drawn."""
    if criterion is not None:
        chosen_criteria(session, criterion)  # a criterion no ranking has is a typo: say so
    report = judge_report(session, per_prompt=True, imported=True, criterion=criterion)
    return {
        "judges": trust_rows(report, rounds, seed, level),
        "bootstrap": {"rounds": rounds, "seed": seed, "level": level, "resampled": "prompts"},
    }
