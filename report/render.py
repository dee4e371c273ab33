"""`render_report`: the report's data as one self-contained HTML file (Jinja2, inline SVG charts).

The page loads nothing: its stylesheet is inlined from `page.css`, its charts
are `<svg>` elements, and its data rides along as a JSON script block for
anyone who wants the numbers. Autoescaping is on; only the charts (made here
by matplotlib) are marked safe.

Undefined names are errors (`StrictUndefined`): every section's data carries
every key the template reads, whatever the store holds, and every chart is
named (None where there is nothing to draw), so a key left out fails in the
tests rather than on a user's store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from preflab.report import charts

HERE = Path(__file__).parent
# The page's sections, in order, with their titles: the builders (build.py) fill them, the template draws them.
SECTIONS = {
    "data": "Data",
    "agreement": "Agreement",
    "criteria": "Criteria",
    "judges": "Judges",
    "leaderboard": "Leaderboard",
    "models": "Datasets and models",
    "optimisation": "Optimisation",
}


def make_charts(report: dict[str, Any]) -> dict[str, str | None]:
    """The page's charts by name: an `<svg>` where its section has the data to draw, else None."""
    charts.require_matplotlib()
    from preflab.report.leaderboard import forest_chart
    from preflab.report.optimisation import bon_chart, self_reward_chart

    data, agreement, criteria, judges, leaderboard, models, optimisation = (report[name] for name in SECTIONS)
    bon, loops = optimisation["bon"], optimisation["self_reward"]
    return {
        "weekly": charts.weekly_chart(data["weekly"]) if data["weekly"]["weeks"] else None,
        "heatmap": charts.heatmap_chart(agreement["heatmap"]) if agreement["heatmap"] else None,
        "tension": charts.tension_chart(criteria["tension"]) if criteria["tension"] else None,
        "judges": charts.judges_chart(judges) if charts.judges_has_chart(judges) else None,
        "leaderboard": forest_chart(leaderboard) if leaderboard["ratings"] else None,
        "lineage": charts.lineage_chart(models["lineage"]) if models["lineage"] else None,
        "bon": bon_chart(bon) if bon else None,
        "self_reward": self_reward_chart(loops) if loops else None,
    }


def _rate(value, digits: int = 2) -> str:
    if value is None:
        return "—"
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text  # no "-0.000"


def _value(value) -> str:
    """A setting or metric as a table shows it."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _duration(seconds) -> str:
    if seconds is None:
        return "—"
    return (
        f"{seconds:.0f} s"
        if seconds < 90
        else f"{seconds / 60:.1f} min"
        if seconds < 5400
        else f"{seconds / 3600:.1f} h"
    )


def _count(value) -> str:
    return "—" if value is None else f"{value:,}"


def _percent(value) -> str:
    return "—" if value is None else f"{value:.0%}"


def _environment():
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    env = Environment(
        loader=FileSystemLoader(str(HERE)),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(rate=_rate, count=_count, percent=_percent, value=_value, duration=_duration)
    return env


def render_html(report: dict[str, Any]) -> str:
    """The page as a string."""
    from markupsafe import Markup

    svgs = {name: Markup(svg) if svg else None for name, svg in make_charts(report).items()}
    data = {k: v for k, v in report.items() if k != "path"}
    return (
        _environment()
        .get_template("page.html.j2")
        .render(
            report=report,
            data=data,
            charts=svgs,
            css=Markup((HERE / "page.css").read_text(encoding="utf-8")),
            sections=[(name, title, name in report["sections"]) for name, title in SECTIONS.items()],
        )
    )


def render_report(report: dict[str, Any], out: str | Path) -> Path:
    """Write the page to `out` (its folder is created); returns the path."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(report), encoding="utf-8")
    return out
