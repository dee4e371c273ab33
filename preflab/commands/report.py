"""`preflab report OUT.html`: the command; the work is `preflab.report.build.write_report`."""

from __future__ import annotations

import click

from preflab.commands.options import echo_result, json_option, pass_settings
from preflab.console import Reporter, plural
from preflab.settings import Settings


@click.command("report")
@click.argument("out", metavar="OUT.html", type=click.Path(dir_okay=False))
@click.option("--open", "open_page", is_flag=True, help="Open the page in a web browser once it is written.")
@click.option("--no-text", is_flag=True, help="Leave out every excerpt of prompt and response texts.")
@click.option(
    "--criterion",
    metavar="NAME",
    help="The criterion agreement, judges and the leaderboard measure (default: overall, else the one with the most "
    "rankings); the Criteria section shows every one.",
)
@json_option
@pass_settings
def page_command(settings: Settings, out, open_page, no_text, criterion, as_json):
    """Write one self-contained HTML page: data, agreement, judges, leaderboard, models, optimisation.

    The page loads nothing from the network (styles, charts and data are inside
    it), names annotators by pseudonym only and shows texts as short excerpts
    (none with --no-text). A section, or part of one, the store has nothing for
    says what it lacks and which command adds it.

    Example: preflab report report.html --open
    """
    from preflab.db.engine import open_sessions
    from preflab.report.build import write_report
    from preflab.report.render import SECTIONS

    with open_sessions(settings.database_url, existing=True).begin() as session:
        report = write_report(session, out, no_text=no_text, criterion=criterion, reporter=Reporter(not as_json))
    if open_page:
        import webbrowser
        from pathlib import Path

        webbrowser.open(Path(report["path"]).resolve().as_uri())
    echo_result(as_json, report, lambda: _written_text(report, SECTIONS))


def _written_text(report: dict, sections: dict[str, str]) -> str:
    """`wrote report.html (6 sections, 4 with data: …)`."""
    holding = ", ".join(sections[name] for name in report["sections"])
    with_data = f"{len(report['sections'])} with data: {holding}" if holding else "none with data: the store is empty"
    return f"wrote {report['path']} ({plural(len(sections), 'section')}, {with_data})"
