"""`build_report` gathers the page's data; `write_report` builds and renders it in one call.

The data is plain JSON-able numbers and short strings, one entry per section.
Every section is built whatever the store holds, with every key (empty lists
and None where there is nothing), and the page says in each section what it
lacks; "sections" names those that hold something.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from preflab import __version__
from preflab.console import SILENT, Reporter
from preflab.report.render import SECTIONS, render_report


def build_report(
    session: Session, *, no_text: bool = False, criterion: str | None = None, reporter: Reporter = SILENT
) -> dict[str, Any]:
    """Everything the page shows, by section; "sections" lists those the store holds something for.

    Args:
        no_text: leave out every excerpt of a prompt or response text.
        criterion: the criterion the agreement, judges and leaderboard sections measure (never a mixture of
            two); None: `overall` where the store has it, else the criterion with the most valid rankings.
            The Criteria section shows every one.
    """
    from preflab.db.leaderboard.board import LeaderboardConfig
    from preflab.report.agreement import agreement_section
    from preflab.report.criteria import criteria_section
    from preflab.report.data import data_section
    from preflab.report.judges import judges_section
    from preflab.report.leaderboard import leaderboard_section
    from preflab.report.models import models_section
    from preflab.report.optimisation import optimisation_section

    criterion = measured_criterion(session, criterion)
    builders = {
        "data": data_section,
        "agreement": lambda s: agreement_section(s, no_text=no_text, criterion=criterion),
        "criteria": criteria_section,
        "judges": lambda s: judges_section(s, criterion),
        "leaderboard": lambda s: leaderboard_section(s, LeaderboardConfig(criterion=criterion)),
        "models": models_section,
        "optimisation": optimisation_section,
    }
    report: dict[str, Any] = {
        "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "preflab_version": __version__,
        "database": session.get_bind().dialect.name,
        "no_text": no_text,
        "criterion": criterion,
    }
    for name, build in builders.items():
        reporter.note(f"report: {SECTIONS[name].lower()}")
        report[name] = build(session)
    report["sections"] = [name for name in SECTIONS if holds_data(name, report[name])]
    return report


def measured_criterion(session: Session, asked: str | None) -> str:
    """The criterion the measuring sections read: the one asked (one sentence if no ranking has it), else
    `overall` where some valid ranking is, else the one with the most valid rankings."""
    from sqlalchemy import func, select

    from preflab.db.models import OVERALL, Ranking, RankingStatus
    from preflab.errors import InputError

    counts = dict(
        session.execute(
            select(Ranking.criterion, func.count())
            .where(Ranking.status == RankingStatus.valid.value)
            .group_by(Ranking.criterion)
        ).all()
    )
    if asked is not None:
        if asked not in counts:
            there = ", ".join(sorted(counts)) or "none"
            raise InputError(f"--criterion {asked}: no valid ranking is by {asked} (the criteria ranked by: {there})")
        return asked
    if OVERALL in counts or not counts:
        return OVERALL
    return max(sorted(counts), key=counts.get)


def holds_data(name: str, section: Any) -> bool:
    """Whether a section has anything to show beyond what it lacks."""
    if name == "data":
        counts = section["counts"]
        return bool(counts["prompts"] or counts["rankings"]["total"] or counts["quarantined"])
    if name == "agreement":
        return bool(section["categories"] or section["annotators"])
    if name == "judges":
        return bool(section)
    if name == "criteria":  # a store of one criterion, overall, has nothing to tell apart
        return any(row["name"] != "overall" for row in section["criteria"])
    if name == "leaderboard":
        return bool(section["ratings"])
    return any(section.values())


def write_report(
    session: Session,
    out: str | Path,
    *,
    no_text: bool = False,
    criterion: str | None = None,
    reporter: Reporter = SILENT,
) -> dict[str, Any]:
    """Build the report from the store and write it as one self-contained HTML file.

    Returns:
        The report's data (as `build_report`), with "path": the file written.
    """
    report = build_report(session, no_text=no_text, criterion=criterion, reporter=reporter)
    reporter.note("report: charts and page")
    report["path"] = str(render_report(report, out))
    return report
