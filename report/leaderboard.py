"""The Leaderboard section: which model is better, and how sure we are, from `preflab leaderboard`.

The ratings are `preflab.db.leaderboard.board.leaderboard`'s with its defaults
(every annotator kind, 1000 seeded bootstrap rounds over rankings: a fraction of a
second on the sample data); this module only relabels the models for the page
(`privacy.model_label`: no local folders) and draws the forest plot, a panel per group of
models that met (their scales do not compare), models of few battles hollow and dashed. Battles name
models, never annotators. A store where no ranking compares two models' replies
gives a section with no ratings, and the page says so.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from preflab.db.leaderboard.board import Leaderboard, LeaderboardConfig, leaderboard
from preflab.errors import InputError
from preflab.report.charts import _figure, _styled, to_svg
from preflab.report.privacy import model_label

RATING_KEYS = ("rating", "median", "lower", "upper")
COUNT_KEYS = ("rank", "group", "battles", "wins", "ties", "losses", "few_battles", "interval")


def empty() -> dict[str, Any]:
    """The section of a store with no two models to compare: every key, nothing in it."""
    return {"ratings": [], "battles": 0, "rankings": 0, "method": None, "left_out": {}, "notes": []}


def leaderboard_section(session: Session, config: LeaderboardConfig | None = None) -> dict[str, Any]:
    """The models' ratings, best first by bootstrap median, with their 95% intervals and battles."""
    try:
        board = leaderboard(session, config or LeaderboardConfig())
    except InputError:  # fewer than two models met in a ranking
        return empty()
    return section_of(board)


def section_of(board: Leaderboard) -> dict[str, Any]:
    """A `Leaderboard` as the page shows it: model labels, ratings, the method in a few keys.

    The ratings are kept whole: the page rounds once, as the command line does (rounding to tenths first
    made 1137.453 read 1138 on the page and 1137 on the terminal).
    """
    labels = {r.model: model_label(r.model) for r in board.ratings}
    ratings = [
        {
            "model": labels[r.model],
            **{k: getattr(r, k) for k in RATING_KEYS},
            **{k: getattr(r, k) for k in COUNT_KEYS},
        }
        for r in board.ratings
    ]
    notes = []
    for note in board.notes:  # they name models by their stored names: relabel them, longest first
        for name in sorted(labels, key=len, reverse=True):
            note = note.replace(name, labels[name])
        notes.append(note)
    method = board.method
    return {
        "ratings": ratings,
        "battles": board.battles,
        "rankings": board.rankings,
        "method": {
            "scale": method["scale"],
            "offset": method["offset"],
            "anchor": method["anchor"],
            "centre_cap": method["centre_cap"],
            "ties": method["ties"],
            "bootstrap": method["bootstrap"],
            "seed": method["seed"],
            "order": method["order"],
            "annotator_kind": board.filters["annotator_kind"],
        },
        "left_out": dict(board.left_out),
        "notes": notes,
    }


@_styled
def forest_chart(section: dict[str, Any]) -> str:
    """Each model a row, best at the top: its rating as a point and its 95% interval as a line.

    Groups that never met have no common scale, so each gets its own axis. A model of few
    battles is drawn hollow, its exact interval dashed, with an arrow where it has no end.
    """
    rows = section["ratings"]
    method = section["method"]
    groups = sorted({r["group"] for r in rows})
    members = [[r for r in rows if r["group"] == g] for g in groups]
    fig = _figure(8.5, 1.2 + 0.42 * len(rows) + 0.5 * (len(groups) - 1))
    axes = fig.subplots(len(groups), 1, squeeze=False, height_ratios=[len(m) for m in members])[:, 0]
    for ax, group, shown in zip(axes, groups, members):
        _forest(ax, shown, method)
        if len(groups) > 1:
            ax.set_title(f"group {group} of {len(groups)}: its own scale, not comparable with the others", fontsize=9)
    axes[-1].set_xlabel(
        f"rating (Elo scale: {method['scale']:.0f} per factor of 10 in the odds; dashed: "
        f"{method['offset']:.0f}, {'the mean' if method['anchor'] == 'mean' else method['anchor']})"
    )
    fig.suptitle("Leaderboard: ratings with their 95% intervals")
    axes[0].legend(fontsize=8, loc="lower right" if len(members[0]) > 2 else "best")
    return to_svg(fig, "leaderboard")


def _forest(ax, rows: list[dict[str, Any]], method: dict[str, Any]) -> None:
    """One group's rows on `ax`: intervals, medians, ratings; open ends to the axis' edge, with an arrow."""
    finite = [v for r in rows for v in (r["rating"], r["lower"], r["upper"]) if v is not None]
    low, high = min(finite), max(finite)
    pad = max(0.08 * (high - low), 20.0)
    low, high = low - pad, high + pad
    ys = range(len(rows))
    for y, row in zip(ys, rows):
        if row["interval"] is None:
            continue
        few = row["interval"] == "exact"
        left = low if row["lower"] is None else row["lower"]
        right = high if row["upper"] is None else row["upper"]
        ax.hlines(y, left, right, color="#3b7dd8", linewidth=2.2, zorder=2, linestyles="--" if few else "-")
        for end, edge, marker in ((row["lower"], low, "<"), (row["upper"], high, ">")):
            if end is None:
                ax.plot([edge], [y], marker=marker, color="#3b7dd8", markersize=7, zorder=3)
    medians = [(r["median"], y) for y, r in zip(ys, rows) if r["median"] is not None]
    if medians:
        ax.scatter(
            [m for m, _ in medians],
            [y for _, y in medians],
            s=260,
            marker="|",
            linewidths=2,
            color="#e8a33d",
            zorder=3,
            label="bootstrap median",
        )
    ranked = [(r["rating"], y) for y, r in zip(ys, rows) if not r["few_battles"]]
    few = [(r["rating"], y) for y, r in zip(ys, rows) if r["few_battles"]]
    if ranked:
        ax.scatter(*zip(*ranked), s=34, color="#1f2933", zorder=4, label="rating (maximum likelihood)")
    if few:
        ax.scatter(
            *zip(*few), s=34, facecolors="white", edgecolors="#1f2933", zorder=4, label="few battles: not ranked"
        )
    ax.axvline(method["offset"], color="#555", linestyle="--", linewidth=1)
    ax.set_xlim(low, high)
    ax.set_yticks(list(ys))
    ax.set_yticklabels([r["model"] if len(r["model"]) <= 32 else r["model"][:31] + "…" for r in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.grid(axis="y", visible=False)
