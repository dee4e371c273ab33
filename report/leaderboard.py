"""The Leaderboard section: which model is better, and how sure we are, from `preflab leaderboard`.

The ratings are `preflab.db.leaderboard.board.leaderboard`'s with its defaults
(every annotator kind, 1000 seeded bootstrap rounds over rankings: a fraction of a
second on the sample data); this module only relabels the models for the page
(`privacy.model_label`: no local folders) and draws the forest plot. Battles name
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
COUNT_KEYS = ("rank", "group", "battles", "wins", "ties", "losses")


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
    """A `Leaderboard` as the page shows it: model labels, rounded ratings, the method in a few keys."""
    labels = {r.model: model_label(r.model) for r in board.ratings}
    ratings = [
        {
            "model": labels[r.model],
            **{k: None if getattr(r, k) is None else round(getattr(r, k), 1) for k in RATING_KEYS},
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
    """Each model a row, best at the top: its rating as a point and its 95% interval as a line."""
    rows = section["ratings"]
    fig = _figure(8.5, 1.2 + 0.42 * len(rows))
    ax = fig.subplots()
    ys = range(len(rows))
    for y, row in zip(ys, rows):
        if row["lower"] is not None:
            ax.hlines(y, row["lower"], row["upper"], color="#3b7dd8", linewidth=2.2, zorder=2)
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
    ax.scatter(
        [r["rating"] for r in rows], list(ys), s=34, color="#1f2933", zorder=4, label="rating (maximum likelihood)"
    )
    method = section["method"]
    ax.axvline(method["offset"], color="#555", linestyle="--", linewidth=1)
    ax.set_yticks(list(ys))
    ax.set_yticklabels([r["model"] if len(r["model"]) <= 32 else r["model"][:31] + "…" for r in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.grid(axis="y", visible=False)
    ax.set_xlabel(
        f"rating (Elo scale: {method['scale']:.0f} per factor of 10 in the odds; dashed: "
        f"{method['offset']:.0f}, {'the mean' if method['anchor'] == 'mean' else method['anchor']})"
    )
    ax.set_title("Leaderboard: ratings with their 95% bootstrap intervals")
    ax.legend(fontsize=8, loc="lower right" if len(rows) > 2 else "best")
    return to_svg(fig, "leaderboard")
