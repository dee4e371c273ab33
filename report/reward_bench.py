"""The reward-model bench in the report: each evaluated reward model's accuracy, breakdowns and comparison.

Read from the model versions' metrics, where `preflab train eval` stores its report
(`preflab.training.reward_eval`); nothing is scored here. Model versions are named
by `privacy.model_label` (a path is cut to its last parts), and a category is a
prompt's source or dataset name, never an annotator.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from preflab.db.models import ModelVersion
from preflab.report.privacy import model_label

LIMIT = 10  # evaluated reward models shown, newest first


def _cell(cell: dict[str, Any] | None) -> dict[str, Any] | None:
    if not cell or cell.get("accuracy") is None:
        return None
    return {"accuracy": cell["accuracy"], "low": cell.get("low"), "high": cell.get("high"), "pairs": cell["pairs"]}


def _groups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"group": row["group"], **cell} for row in rows if (cell := _cell(row))]


def reward_bench_rows(session: Session) -> list[dict[str, Any]]:
    """One row per reward model or pair ranker whose stored evaluation has the bench, newest first."""
    versions = session.scalars(
        select(ModelVersion).where(ModelVersion.kind.in_(("reward", "pair-ranker"))).order_by(ModelVersion.id.desc())
    )
    out = []
    for version in versions:
        report = (version.metrics or {}).get("eval") or {}
        bench = report.get("bench")
        if not bench:
            continue
        position = bench.get("position") or {}
        shorter, longer = bench["length_bias"]["rows"]
        compared = report.get("compare")
        out.append(
            {
                "model": model_label(version.name),
                "kind": version.kind,
                "dataset": report.get("dataset_version"),
                "overall": _cell(bench),
                "prompts": bench["prompts"],
                "ties": bench["ties"],
                "bootstrap": bench["bootstrap"],
                "categories": _groups(bench["by_category"]),
                "kinds": _groups(bench["by_annotator_kind"]),
                "margins": _groups(bench["by_margin"]),
                "shorter": _cell(shorter),
                "longer": _cell(longer),
                "length_gap": bench["length_bias"]["gap"],
                "position": (
                    {
                        "first": _cell(position["chosen_shown_first"]),
                        "second": _cell(position["chosen_shown_second"]),
                        "order_decides": position["order_decides"],
                    }
                    if position.get("applies")
                    else None
                ),
                "compare": None
                if not compared
                else {
                    "other": model_label(compared["other"]),
                    "difference": compared["difference"],
                    "low": compared["low"],
                    "high": compared["high"],
                    "p_value": compared["p_value"],
                    "other_accuracy": compared["other_accuracy"]["accuracy"],
                },
            }
        )
        if len(out) == LIMIT:
            break
    return out
