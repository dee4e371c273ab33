"""The leaderboard job: which model is better, and how sure we are (`preflab leaderboard`).

`leaderboard(session, config)` reads the battles (`battles.py`), fits the ratings
(`fit.py`), bootstraps their intervals (`bootstrap.py`) and returns a `Leaderboard`;
`rate(battles, config)` does the same on battles already in memory. A board is one criterion's
(`LeaderboardConfig.criterion`, `overall` by default); `leaderboards` gives one per criterion.

Models that never met, directly or through others, fall in separate groups whose
ratings do not compare: each group is centred on its own (`fit.centre`), ranks are counted
within a group, and the board lists group by group (the group of the most battles first),
each by rank, then by median. A model of few battles (`exact.few_battles`) gets the exact
test's interval instead of the bootstrap's, no rank, and no say in the others' ranks: it is
listed after its group's ranked models.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from preflab.db.ingest.records import criterion_name
from preflab.db.leaderboard.battles import Battles, Filters, read_battles, style_counts, style_features
from preflab.db.leaderboard.bootstrap import (
    Cells,
    bootstrap_ratings,
    bootstrap_style,
    centred,
    groups_of,
    intervals,
    rank_by_interval,
)
from preflab.db.leaderboard.exact import (
    exact_intervals,
    few_battles,
    ranked_weights,
    rankings_holding,
    record,
)
from preflab.db.leaderboard.fit import (
    CENTRE_CAP,
    STYLE_L2,
    centre,
    centre_cap,
    centre_weights,
    fit_contextual,
    fit_pairs,
    to_elo,
)
from preflab.db.leaderboard.method import described, notes
from preflab.db.leaderboard.pairwise import pairwise_tables
from preflab.db.models import OVERALL, Ranking
from preflab.db.pairs.build import KINDS
from preflab.db.quality.agreement import chosen_criteria
from preflab.errors import ConfigError, InputError, Invalid


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
        default=None,
        metadata={
            "help": "The model fixed at 1000 (default: each group's mean rating is 1000, a model weighing its "
            f"battles up to {CENTRE_CAP}, or up to a tenth of the median model's on a larger board)."
        },
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
    criterion: str | None = field(
        default=None,
        metadata={
            "help": "Only rankings of this criterion (helpfulness, harmlessness…); default: one board per criterion "
            "the rankings have (a library call: overall).",
            "metavar": "NAME",
        },
    )

    def __post_init__(self) -> None:
        if self.annotator_kind not in KINDS:
            raise ConfigError(f"--annotator-kind must be one of {', '.join(KINDS)}, got {self.annotator_kind!r}")
        if self.bootstrap < 0:
            raise ConfigError(f"--bootstrap must be 0 or more, got {self.bootstrap}")
        if self.criterion is not None:
            try:
                criterion_name(self.criterion, "--criterion")
            except Invalid as exc:
                raise ConfigError(str(exc)) from None
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
        return Filters(self.annotator_kind, self.since_at, self.source, self.prompts, self.criterion or OVERALL)


@dataclass
class Rating:
    """One model's rating: the full data's fit, and its bootstrap median and 95% interval (Elo scale).

    A model of few battles (`few_battles` says why) has the exact test's interval, no median
    and no rank; an end of its interval that no rating reaches (a record of all losses, or all
    wins) is None. Without a bootstrap, every model's median and interval are None.
    """

    model: str
    rating: float
    median: float | None
    lower: float | None
    upper: float | None
    rank: int | None  # 1 + the ranked models of its group whose interval lies wholly above this one's
    battles: int
    wins: int
    ties: int
    losses: int
    group: int = 1  # models that met, directly or through others: 1 the group of the most battles, 2…
    few_battles: str | None = None  # why it is not ranked: "only 3 battles", "lost every battle"…
    interval: str | None = None  # "bootstrap", "exact" (few battles), None (no bootstrap)
    held: int | None = None  # bootstrap rounds holding the model


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
    criterion: str = OVERALL  # what the rankings it rates order by

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


def leaderboards(session: Session, config: LeaderboardConfig) -> dict[str, Leaderboard | str]:
    """One board per criterion (`config.criterion` alone, else every criterion of the valid rankings): criterion ->
    its board, or why it has none (the sentence `leaderboard` raises: fewer than two models met…).

    Raises:
        InputError: no criterion has a board (the first one's reason), or a criterion no ranking has.
    """
    out: dict[str, Leaderboard | str] = {}
    first: InputError | None = None
    for name in chosen_criteria(session, config.criterion):
        try:
            out[name] = leaderboard(session, replace(config, criterion=name))
        except InputError as exc:
            out[name], first = str(exc), first or exc
    if first is not None and not any(isinstance(board, Leaderboard) for board in out.values()):
        raise first
    return out


def rate(battles: Battles, config: LeaderboardConfig, style: np.ndarray | None = None) -> Leaderboard:
    """The leaderboard of battles in memory; `style`: (N, 2, 4) style counts of a and b, for style control."""
    filters = {
        "annotator_kind": config.annotator_kind,
        "since": config.since,
        "source": config.source,
        "prompts": config.prompts,
    }
    if len(battles.models) < 2:
        criterion = {"criterion": config.criterion} if config.criterion not in (None, OVERALL) else {}
        said = ", ".join(f"{k} {v}" for k, v in {**criterion, **filters}.items() if v not in (None, "any"))
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
    played, wins, ties, losses = record(battles)
    units = rankings_holding(battles)  # what a bootstrap draws: a model weighs its rankings, not their battles
    groups = groups_of(cells.pairs, played)
    weights = centre_weights(units, groups)
    point = centre(r, groups, weights, anchor)
    raw = held = samples = None
    if config.bootstrap:
        raw, held = bootstrap_ratings(
            battles, config.bootstrap, config.seed, r, cells=cells, weights=weights, anchor=anchor
        )
    few = few_battles(
        played, wins, ties, losses, None if held is None else held.sum(axis=0), config.bootstrap, rankings=units
    )
    if config.bootstrap:
        samples = centred(raw, held, point, groups, ranked_weights(weights, few, groups), anchor)
    ratings = _ratings(battles, groups, point, samples, few)
    board = Leaderboard(
        ratings,
        len(battles),
        battles.rankings,
        described(config.anchor, config.bootstrap, config.seed),
        filters,
        dict(battles.left_out),
        criterion=config.criterion or OVERALL,
    )
    board.method["centre_cap"] = [centre_cap(units[groups == g]) for g in range(int(groups.max()) + 1)]
    board.notes = notes(battles, groups, ratings)
    if config.style_control:
        _style(board, battles, groups, weights, few, config, style, anchor)
    if config.pairwise:
        board.pairwise = pairwise_tables(battles, [r.model for r in board.ratings], point, samples)
    return board


def _ratings(
    battles: Battles,
    groups: np.ndarray,
    point: np.ndarray,
    samples: np.ndarray | None,
    few: list[str | None],
    logit: np.ndarray | None = None,
) -> list[Rating]:
    """The board's rows from the centred fit and samples (natural units); `logit`: style control's f·β per battle."""
    played, wins, ties, losses = record(battles)
    n = len(played)
    elo = to_elo(point)
    none: list[float | None] = [None] * n
    median, lower, upper, held = list(none), list(none), list(none), list(none)
    ranked = np.array([why is None for why in few])
    if samples is None:
        centre_of, ranks = elo, rank_by_interval(elo, elo, groups, ranked)
    else:
        spread = intervals(to_elo(samples))
        exact = exact_intervals(battles, point, np.flatnonzero(~ranked), logit)
        ranks = rank_by_interval(spread["lower"], spread["upper"], groups, ranked)
        centre_of = np.where(ranked, spread["median"], elo)
        held = [int(h) for h in spread["held"]]
        for i in range(n):
            if ranked[i]:
                median[i], lower[i], upper[i] = (float(spread[k][i]) for k in ("median", "lower", "upper"))
            else:
                lower[i], upper[i] = (float(to_elo(x)) if np.isfinite(x) else None for x in exact[i])
    order = np.lexsort((-centre_of, np.where(ranked, ranks, 0), ~ranked, groups))
    return [
        Rating(
            battles.models[i],
            float(elo[i]),
            median[i],
            lower[i],
            upper[i],
            int(ranks[i]) if ranked[i] else None,
            int(played[i]),
            int(wins[i]),
            int(ties[i]),
            int(losses[i]),
            int(groups[i]) + 1,
            few[i],
            None if samples is None else "bootstrap" if ranked[i] else "exact",
            held[i],
        )
        for i in order
    ]


def _style(
    board: Leaderboard,
    battles: Battles,
    groups: np.ndarray,
    weights: np.ndarray,
    few: list[str | None],
    config: LeaderboardConfig,
    style: np.ndarray | None,
    anchor: int | None,
) -> None:
    """Style control's board, its models ranked or not as on the plain board."""
    if style is None:
        raise InputError("style control needs each reply's length and markdown counts")
    features, names = style_features(style)
    n = len(battles.models)
    theta = fit_contextual(battles.a, battles.b, battles.outcome, features, n)
    point = centre(theta[:n], groups, weights, anchor)
    samples = None
    if config.bootstrap:
        raw, held = bootstrap_style(
            battles, features, config.bootstrap, config.seed, theta, weights=weights, anchor=anchor
        )
        samples = centred(raw[:, :n], held, point, groups, ranked_weights(weights, few, groups), anchor)
    board.style = _ratings(battles, groups, point, samples, few, features @ theta[n:])
    board.style_coefficients = {name: float(theta[n + c]) for c, name in enumerate(names)}
    board.method["style_control"] = {
        "features": names,
        "l2": STYLE_L2,
        "covariate": "(a − b) / (a + b + 1) of each count, standardised over the battles; length in characters",
    }
