"""The Judges section: how far each AI judge can be trusted, from `preflab judge report`.

The measures are `preflab.labelling.judges.report.judge_report`'s, with the
interval of agreement with people and the position bias of
`preflab.labelling.judges.trust` (`preflab stats --judges`); this module only
relabels them for the page (the judge's name, as `stats --judges` names it, with local
folders dropped: `privacy.ai_label`; a judge is no person, so no pseudonym hides it, and
the four UltraFeedback score fields are four judges a reader can tell apart), leaves out
judges that ranked nothing and orders them as `stats --judges` does: which judge to trust
first. Every AI annotator is a judge here, imported ones too (kind "import": GPT-4's
UltraFeedback ratings beside the team's people).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from preflab.db.models import OVERALL, Annotator
from preflab.labelling.judges.report import judge_report
from preflab.labelling.judges.trust import trust_rows
from preflab.report.privacy import ai_label, judge_model_label

MEASURES = ("swap_consistency", "first_position_rate", "longer_wins", "length_correlation", "parse_failure_rate")
# Measures `judge_report` gives where the judges record them (newer judges); shown when any judge has one.
OPTIONAL = ("method", "score_mass", "seconds_per_candidate", "cost_per_1000_pairs", "pairs_per_s")


def judges_section(session: Session, criterion: str = OVERALL) -> list[dict[str, Any]]:
    """One row per judge that ranked something by `criterion`, in the order to trust them (none: an empty list)."""
    rows = judge_report(session, per_prompt=True, imported=True, criterion=criterion)
    report = {row["annotator_id"]: row for row in rows}
    trust = trust_rows(list(report.values()))
    if not trust:
        return []
    rows = [report[t["annotator_id"]] for t in trust]
    configs = {
        aid: config or {}
        for aid, config in session.execute(
            select(Annotator.id, Annotator.config).where(Annotator.id.in_([r["annotator_id"] for r in rows]))
        )
    }
    out = []
    for row, t in zip(rows, trust):
        agreement = row["human_agreement"]
        # A reward model is named by its model version where the judge recorded it (best-of-n does); an import
        # with no model by where it came from ("import:ultrafeedback"), as the Data section names sources.
        model = configs[row["annotator_id"]].get("model_version") or judge_model_label(
            row["model"] or (row["source"] if row["imported"] else None)
        )
        out.append(
            {
                "judge": ai_label(t["judge"]),
                "kind": row["kind"],
                "imported": row["imported"],
                "model": model,
                "rankings": row["rankings"],
                "prompts": row["prompts"],
                "pairs_judged": row["pairs_judged"],
                "score_attempts": row["score_attempts"],
                "length_pairs": row["length_pairs"],
                **{name: row[name] for name in MEASURES},
                **{name: row.get(name) for name in OPTIONAL},
                "human_prompts": agreement["prompts"],
                "human_shared_pairs": agreement["shared_pairs"],
                "human_agreement": agreement["pairwise_agreement"],
                "human_kendall_tau": agreement["kendall_tau"],
                "human_agreement_low": t["agreement_low"],
                "human_agreement_high": t["agreement_high"],
                **{name: t[name] for name in ("position_bias", "position_first", "position_second")},
            }
        )
    return out
