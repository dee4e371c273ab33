"""`preflab leaderboard`: the command, and how a leaderboard reads on a terminal.

The work is `preflab.db.leaderboard.board.leaderboards`: one board per criterion; `--json` prints each
criterion's board as it is, keyed by the criterion (one that has none: {"criterion", "error"}).
"""

from __future__ import annotations

from typing import Any

import click

from preflab.commands.options import build_config, config_options, echo_result, json_option, pass_settings
from preflab.console import plural
from preflab.db.leaderboard.board import Leaderboard, LeaderboardConfig, Rating
from preflab.db.models import OVERALL
from preflab.settings import Settings


@click.command("leaderboard")
@config_options(LeaderboardConfig)
@json_option
@pass_settings
def leaderboard_command(settings: Settings, as_json, **options):
    """Rate the models whose replies were ranked: Bradley–Terry ratings with 95% intervals.

    Every ranking is expanded into battles between the models of its candidates
    (a model version's name where a candidate has one); a tie is half a win to
    each side. Ratings follow Chatbot Arena's conventions (FastChat): 400 points
    are ten times the odds of winning, the mean rating is 1000 (or --anchor's
    model; a model of few battles weighs less in the mean, so that a newcomer
    does not move the others), and the 95% interval of each comes from a
    bootstrap over rankings with a fixed seed. Models are ordered by rank, then
    by the bootstrap median; rank 1 is shared by every model no other is surely
    above. A model of few battles (under 10, all won or all lost) gets an exact
    test's interval instead, an open end where no rating is too high or too low
    for its record, and no rank ("–"). Models that never met, directly or through
    others, are listed group by group, ranked within their group. What a filter
    leaves out is counted, never dropped silently. A ranking's battles are those
    of its criterion: one board per criterion the rankings have (helpfulness,
    harmlessness…), or --criterion's alone.

    Example: preflab leaderboard --annotator-kind human --style-control --pairwise
    """
    from preflab.db.engine import open_sessions
    from preflab.db.leaderboard.board import leaderboards

    config = build_config(LeaderboardConfig, options)
    with open_sessions(settings.database_url, existing=True).begin() as session:
        boards = leaderboards(session, config)
    data = {
        name: board.as_dict() if isinstance(board, Leaderboard) else {"criterion": name, "error": board}
        for name, board in boards.items()
    }
    echo_result(as_json, data, lambda: boards_text(boards))


def boards_text(boards: dict[str, Leaderboard | str]) -> str:
    """Each criterion's board under its name; a store of `overall` rankings only: that board alone, unheaded."""
    if list(boards) == [OVERALL]:
        return leaderboard_text(boards[OVERALL])
    blocks = [
        f"criterion {name}:\n" + leaderboard_text(board)
        if isinstance(board, Leaderboard)
        else f"criterion {name}: no board: {board}"
        for name, board in boards.items()
    ]
    return "\n\n".join(blocks)


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}"


def _interval(r: Rating) -> str:
    if r.interval is None:
        return "—"
    return ("−∞" if r.lower is None else f"{r.lower:.0f}") + " – " + ("∞" if r.upper is None else f"{r.upper:.0f}")


def leaderboard_text(board: Leaderboard) -> str:
    """The table and what it rests on (no trailing newline: `click.echo` adds it)."""
    m = board.method
    kinds = {"any": "all annotators", "human": "people", "ai": "AI judges"}[board.filters["annotator_kind"]]
    kept = ", ".join(
        f"{name} {value}" for name, value in board.filters.items() if value is not None and name != "annotator_kind"
    )
    lines = [
        f"{plural(len(board.ratings), 'model')}, {plural(board.battles, 'battle')} from "
        f"{plural(board.rankings, 'ranking')} by {kinds}" + (f" ({kept})" if kept else "")
    ]
    caps = sorted(set(m.get("centre_cap") or [50]))
    anchor = (
        f"the mean rating is 1000 (a model weighing its battles, up to {' or '.join(f'{c:.0f}' for c in caps)})"
        if m["anchor"] == "mean"
        else f"{m['anchor']} is fixed at 1000"
    )
    lines.append(f"Bradley–Terry, as Chatbot Arena rates: 400 points = 10× the odds of winning; {anchor}; {m['ties']}.")
    if m["bootstrap"]:
        lines.append(
            f"95% intervals from {m['bootstrap']:,} bootstrap rounds over rankings (seed {m['seed']}); "
            "ordered by rank, then the bootstrap median; rank: 1 + the models surely above; "
            "–: few battles, an exact test's interval (∞: no bound on that side)."
        )
    else:
        lines.append("no bootstrap (--bootstrap 0): ratings only, no intervals.")
    style = {r.model: r for r in board.style or ()}
    width = max(5, *(len(r.model) for r in board.ratings))
    header = f"{'rank':>4}  {'model':<{width}}  {'rating':>6}  {'95% interval':>12}"
    if style:
        header += f"  {'style-ctrl':>10}  {'95% interval':>12}"
    header += f"  {'battles':>7}  {'won':>6}  {'tied':>6}  {'lost':>6}"
    if any(r.few_battles for r in board.ratings):
        header += "  not ranked"
    lines += ["", header]
    groups = board.ratings[-1].group if board.ratings else 1
    for k, r in enumerate(board.ratings):
        if groups > 1 and (k == 0 or board.ratings[k - 1].group != r.group):
            members = sum(1 for other in board.ratings if other.group == r.group)
            lines.append(
                f"group {r.group} of {groups} ({plural(members, 'model')}; ratings and ranks compare only "
                "within a group)"
            )
        rank = "–" if r.rank is None else r.rank
        row = f"{rank:>4}  {r.model:<{width}}  {_number(r.rating):>6}  {_interval(r):>12}"
        if style:
            s = style[r.model]
            row += f"  {_number(s.rating):>10}  {_interval(s):>12}"
        row += f"  {r.battles:>7,}  {r.wins:>6,}  {r.ties:>6,}  {r.losses:>6,}"
        lines.append(row + (f"  {r.few_battles}" if r.few_battles else ""))
    if board.style_coefficients is not None:
        effects = ", ".join(f"{name} {value:+.3f}" for name, value in board.style_coefficients.items()) or "none"
        lines += [
            "",
            f"style control (L2 {m['style_control']['l2']}): the rating with reply length and markdown "
            f"held equal; effect on the log-odds per standard deviation: {effects}",
        ]
    for reason, n in board.left_out.items():
        lines.append(f"left out {plural(n, 'battle')}: {reason}")
    lines += [f"note: {note}" for note in board.notes]
    if board.pairwise:
        lines += _pairwise_text(board.pairwise)
    return "\n".join(lines)


def _pairwise_text(pairwise: dict[str, Any]) -> list[str]:
    models = pairwise["models"]
    width = max(len(name) for name in models)
    tables = [
        ("observed win rate of the row against the column (ties half; — never met)", pairwise["win_rate"]),
        ("predicted probability that the row beats the column (from the ratings)", pairwise["predicted"]),
    ]
    if pairwise["share_better"] is not None:
        tables.append(("share of bootstrap rounds rating the row above the column", pairwise["share_better"]))
    tables.append(("battles between the row and the column", pairwise["battles"]))
    lines = []
    for title, matrix in tables:
        lines += ["", title, " " * (width + 5) + "".join(f"{k + 1:>7}" for k in range(len(models)))]
        for k, (name, row) in enumerate(zip(models, matrix)):
            cells = "".join(
                f"{'—' if v is None or (i == k and title.startswith('battles')) else _cell(v):>7}"
                for i, v in enumerate(row)
            )
            lines.append(f"{k + 1:>3}  {name:<{width}}{cells}")
    return lines


def _cell(value: float | int) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:.2f}"
