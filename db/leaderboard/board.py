"""The leaderboard job: which model is better, and how sure we are (`preflab leaderboard`).

`leaderboard(session, config)` reads the battles (`battles.py`), fits the ratings
(`fit.py`), bootstraps their intervals (`bootstrap.py`) and returns a `Leaderboard`;
`rate(battles, config)` does the same on battles already in memory.

Models that never met, directly or through others, fall in separate groups whose
ratings do not compare: ranks are counted within a group, and the board lists group
by group (the group of the most battles first), each by rank, then by median.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components
from sqlalchemy import select
from sqlalchemy.orm import Session

from preflab.db.leaderboard.battles import Battles, Filters, read_battles, style_counts, style_features
from preflab.db.leaderboard.bootstrap import (
    Cells,
    bootstrap_ratings,
    bootstrap_style,
    intervals,
    rank_by_interval,
    share_better,
)
from preflab.db.leaderboard.fit import ALPHA, L2, OFFSET, SCALE, STYLE_L2, fit_contextual, fit_pairs, to_elo
from preflab.db.models import Ranking
from preflab.db.pairs.build import KINDS
from preflab.errors import ConfigError, InputError

TIES = "a tie is half a win to each side"


@dataclass
class LeaderboardConfig:
    """Which rankings the leaderboard reads and how it rates the models."""

    annotator_kind: str = field(
        default="any", metadata={"help": "Whose rankings: people's, AI judges', or both.", "choices": KINDS}
    )
    since: str | None = field(
        default=None,
        metadata={
            "help": "Only rankings stored at or after this date or time (ISO 8601, e.g. 2025-01-31; UTC unless it "
            "names an offset)."
        },
    )
    source: str | None = field(
        default=None,
        metadata={
            "help": "Only rankings of this source: import:FORMAT for a public dataset (import:arena, import:hh-rlhf…), "
            "import for JSON Lines rankings, label-studio, judge or bon."
        },
    )
    prompts: str | None = field(default=None, metadata={"help": "Only prompts of this split (train or test)."})
    bootstrap: int = field(
        default=1000, metadata={"help": "Bootstrap rounds over rankings for the 95% intervals (0: ratings only)."}
    )
    seed: int = field(default=0, metadata={"help": "Seed of the bootstrap draws."})
    anchor: str | None = field(
        default=None, metadata={"help": "The model fixed at 1000 (default: the mean rating is 1000)."}
    )
    style_control: bool = field(
        default=False,
        metadata={
            "help": "Also rate the models with reply length and markdown (headers, lists, bold) as covariates, so "
            "that writing more is not what ranks a model up; shows both ratings."
        },
    )
    pairwise: bool = field(
        default=False,
        metadata={"help": "Also show the observed win-rate matrix and every pair's predicted win probability."},
    )

    def __post_init__(self) -> None:
        if self.annotator_kind not in KINDS:
            raise ConfigError(f"--annotator-kind must be one of {', '.join(KINDS)}, got {self.annotator_kind!r}")
        if self.bootstrap < 0:
            raise ConfigError(f"--bootstrap must be 0 or more, got {self.bootstrap}")
        self.since_at = None
        if self.since:
            try:
                when = datetime.fromisoformat(self.since)
            except ValueError:
                raise ConfigError(
                    f"--since must be a date or time such as 2025-01-31 or 2025-01-31T09:00, got {self.since!r}"
                ) from None
            self.since_at = when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)

    def filters(self) -> Filters:
        return Filters(self.annotator_kind, self.since_at, self.source, self.prompts)


@dataclass
class Rating:
    """One model's rating: the full data's fit, and its bootstrap median and 95% interval (Elo scale)."""

    model: str
    rating: float
    median: float | None
    lower: float | None
    upper: float | None
    rank: int  # 1 + the models of its group whose interval lies wholly above this one's
    battles: int
    wins: int
    ties: int
    losses: int
    group: int = 1  # models that met, directly or through others: 1 the group of the most battles, 2…


@dataclass
class Leaderboard:
    ratings: list[Rating]  # by group, then rank, then bootstrap median (rating without a bootstrap), best first
    battles: int
    rankings: int
    method: dict[str, Any]
    filters: dict[str, Any]
    left_out: dict[str, int] = field(default_factory=dict)
    style: list[Rating] | None = None  # style-controlled, the same models, best first
    style_coefficients: dict[str, float] | None = None  # logit per standard deviation of each feature
    pairwise: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def leaderboard(session: Session, config: LeaderboardConfig) -> Leaderboard:
    """Rate the models whose candidates were ranked, with bootstrap intervals.

    Raises:
        InputError: fewer than two models met in the rankings the filters keep, or an
            anchor that is not one of them.
    """
    battles = read_battles(session, config.filters(), with_candidates=config.style_control)
    if len(battles.models) < 2 and config.source is not None:
        sources = sorted(session.scalars(select(Ranking.source).distinct()))
        if config.source not in sources:
            raise InputError(
                f"no ranking has source {config.source!r} (the rankings' sources: {', '.join(sources) or 'none yet'})"
            )
    style = None
    if config.style_control and len(battles):
        ids, where = np.unique(battles.candidates, return_inverse=True)
        style = style_counts(session, ids)[where.reshape(-1)].reshape(len(battles), 2, -1)
    return rate(battles, config, style)


def rate(battles: Battles, config: LeaderboardConfig, style: np.ndarray | None = None) -> Leaderboard:
    """The leaderboard of battles in memory; `style`: (N, 2, 4) style counts of a and b, for style control."""
    filters = {
        "annotator_kind": config.annotator_kind,
        "since": config.since,
        "source": config.source,
        "prompts": config.prompts,
    }
    if len(battles.models) < 2:
        said = ", ".join(f"{k} {v}" for k, v in filters.items() if v not in (None, "any"))
        why = "; ".join(f"{n:,} left out: {reason}" for reason, n in battles.left_out.items())
        raise InputError(
            "no ranking compares candidates of two different models"
            + (f" (with {said})" if said else "")
            + (f" ({why})" if why else "")
        )
    anchor = None
    if config.anchor is not None:
        if config.anchor not in battles.models:
            raise InputError(f"--anchor {config.anchor!r} is not on the board (models: {', '.join(battles.models)})")
        anchor = battles.models.index(config.anchor)
    cells = Cells(battles)
    score, total = cells.pair_totals(np.bincount(cells.cell_of_battle, minlength=len(cells.codes)).astype(float))
    r = fit_pairs(cells.pairs, score, total)
    samples = bootstrap_ratings(battles, config.bootstrap, config.seed, r, cells=cells) if config.bootstrap else None
    groups = _groups(battles, cells)
    ratings = _ratings(battles, groups, to_elo(r, anchor), None if samples is None else to_elo(samples, anchor))
    board = Leaderboard(ratings, len(battles), battles.rankings, _method(config), filters, dict(battles.left_out))
    board.notes = _notes(battles, groups, ratings)
    if config.style_control:
        _style(board, battles, groups, config, style, anchor)
    if config.pairwise:
        board.pairwise = _pairwise(battles, board.ratings, samples, anchor)
    return board


def _method(config: LeaderboardConfig) -> dict[str, Any]:
    return {
        "model": "Bradley–Terry (maximum likelihood, FastChat's conventions)",
        "base": 10,
        "alpha": ALPHA,
        "scale": SCALE,
        "offset": OFFSET,
        "anchor": config.anchor or "mean",
        "ties": TIES,
        "l2": L2,
        "bootstrap": config.bootstrap,
        "seed": config.seed,
        "bootstrap_unit": "ranking",
        "interval": "95%: the 2.5% and 97.5% quantiles of the bootstrap ratings",
        "order": "group, then rank, then " + ("bootstrap median" if config.bootstrap else "rating"),
    }


def _counts(battles: Battles) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n = len(battles.models)
    played = np.bincount(battles.a, minlength=n) + np.bincount(battles.b, minlength=n)
    a_won, tie = battles.outcome == 1.0, battles.outcome == 0.5
    b_won = battles.outcome == 0.0
    wins = np.bincount(battles.a[a_won], minlength=n) + np.bincount(battles.b[b_won], minlength=n)
    ties = np.bincount(battles.a[tie], minlength=n) + np.bincount(battles.b[tie], minlength=n)
    return played, wins, ties, played - wins - ties


def _groups(battles: Battles, cells: Cells) -> np.ndarray:
    """Each model's group (0: the group of the most battles), models joined by the battles between them."""
    n = len(battles.models)
    graph = csr_matrix((np.ones(len(cells.pairs)), (cells.pairs.i, cells.pairs.j)), shape=(n, n))
    parts, label = connected_components(graph, directed=False)
    played = _counts(battles)[0]
    size = np.bincount(label, weights=played, minlength=parts)  # twice the group's battles
    first = np.unique(label, return_index=True)[1]  # each group's first model
    order = np.lexsort((first, -size))  # the most battles first; then the group met first
    number = np.empty(parts, dtype=np.int64)
    number[order] = np.arange(parts)
    return number[label]


def _ratings(battles: Battles, groups: np.ndarray, elo: np.ndarray, samples: np.ndarray | None) -> list[Rating]:
    played, wins, ties, losses = _counts(battles)
    if samples is None:  # 1 + the models of the group rated higher
        centre, ranks = elo, rank_by_interval(elo, elo, groups)
        spread = {"median": [None] * len(elo), "lower": [None] * len(elo), "upper": [None] * len(elo)}
    else:
        spread = intervals(samples)
        centre, ranks = spread["median"], rank_by_interval(spread["lower"], spread["upper"], groups)
        spread = {k: [float(x) for x in v] for k, v in spread.items()}
    order = np.lexsort((-centre, ranks, groups))
    return [
        Rating(
            battles.models[i],
            float(elo[i]),
            spread["median"][i],
            spread["lower"][i],
            spread["upper"][i],
            int(ranks[i]),
            int(played[i]),
            int(wins[i]),
            int(ties[i]),
            int(losses[i]),
            int(groups[i]) + 1,
        )
        for i in order
    ]


def _style(
    board: Leaderboard,
    battles: Battles,
    groups: np.ndarray,
    config: LeaderboardConfig,
    style: np.ndarray | None,
    anchor: int | None,
) -> None:
    if style is None:
        raise InputError("style control needs each reply's length and markdown counts")
    features, names = style_features(style)
    n = len(battles.models)
    theta = fit_contextual(battles.a, battles.b, battles.outcome, features, n)
    samples = bootstrap_style(battles, features, config.bootstrap, config.seed, theta) if config.bootstrap else None
    board.style = _ratings(
        battles, groups, to_elo(theta[:n], anchor), None if samples is None else to_elo(samples[:, :n], anchor)
    )
    board.style_coefficients = {name: float(theta[n + c]) for c, name in enumerate(names)}
    board.method["style_control"] = {
        "features": names,
        "l2": STYLE_L2,
        "covariate": "(a − b) / (a + b + 1) of each count, standardised over the battles; length in characters",
    }


def _notes(battles: Battles, groups: np.ndarray, ratings: list[Rating]) -> list[str]:
    """What a reader must know to read the ratings: models that never met, ratings held finite by the penalty."""
    notes = []
    if groups.max() > 0:
        listed = [
            f"group {k}: " + ", ".join(r.model for r in ratings if r.group == k)
            for k in range(1, int(groups.max()) + 2)
        ]
        notes.append(
            "these groups of models never met, directly or through others, so ratings and ranks compare "
            "only within a group: " + " | ".join(listed)
        )
    _played, wins, ties, losses = _counts(battles)
    for name, w, t, lost in zip(battles.models, wins, ties, losses):
        if w + t == 0 or lost + t == 0:
            notes.append(
                f"{name} {'lost' if w + t == 0 else 'won'} every battle: its rating is held finite only "
                f"by the fit's small L2 penalty, and more battles will move it"
            )
    return notes


def _pairwise(
    battles: Battles, ratings: list[Rating], samples: np.ndarray | None, anchor: int | None
) -> dict[str, Any]:
    """Every pair, in board order: battles, the observed win rate (ties half), the predicted win probability."""
    index = {m: k for k, m in enumerate(battles.models)}
    order = [index[r.model] for r in ratings]
    n = len(battles.models)
    played = np.zeros((n, n))
    scored = np.zeros((n, n))
    np.add.at(played, (battles.a, battles.b), 1.0)
    np.add.at(scored, (battles.a, battles.b), battles.outcome)
    played, scored = played + played.T, scored + (played.T - scored.T)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(played > 0, scored / played, np.nan)
    elo = np.array([r.rating for r in sorted(ratings, key=lambda r: index[r.model])])
    predicted = 1.0 / (1.0 + 10.0 ** ((elo[None, :] - elo[:, None]) / SCALE))
    better = share_better(to_elo(samples, anchor)) if samples is not None else None

    def matrix(values: np.ndarray | None, digits: int = 4) -> list[list[float | None]] | None:
        if values is None:
            return None
        return [
            [None if i == j or np.isnan(values[i, j]) else round(float(values[i, j]), digits) for j in order]
            for i in order
        ]

    return {
        "models": [battles.models[i] for i in order],
        "battles": [[int(played[i, j]) for j in order] for i in order],
        "win_rate": matrix(rate),
        "predicted": matrix(predicted),
        "share_better": matrix(better),
    }
