"""Annotator quality: how far to trust each person who ranks, and who to leave out.

For each human annotator (by pseudonym), over their valid rankings:

- agreement with gold: each ranking of a gold prompt against its gold answer
  (`preflab.db.quality.gold`): Kendall tau-b (mean over rankings) and the pairwise rate
  (pairs ordered as gold orders them / pairs both order strictly);
- agreement with the consensus of the others, leave-one-out: on each prompt
  someone else ranked too, the ranking against the Borda consensus of the other
  annotators' rankings of that prompt (the annotator's own never counts);
- the share of rankings identical to the order shown (submitted untouched);
- the median of Label Studio's `lead_time`, where it was recorded.

Every measure is within one criterion (`Ranking.criterion`): a person's helpfulness rankings are
compared with the others' helpfulness rankings only, and flagged on their own. A gold answer
(`GoldAnswer`) is of one criterion too: rankings are measured against their criterion's.

Flags say why an annotator looks careless; each needs `min_measured` rankings
behind it, so one unlucky ranking flags nobody. `excluded_annotators` turns
flags into the `{annotator id: [reasons]}` that `build_pairs` leaves out (and
records by pseudonym). The comparisons run in numpy (`preflab.db.quality.consensus`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from preflab.db.models import OVERALL, Annotator, AnnotatorKind, GoldAnswer, Ranking, RankingStatus
from preflab.db.quality.agreement import Agreement, chosen_criteria
from preflab.db.quality.gold import gold_tiers
from preflab.errors import ConfigError, InputError

FLAGS = ("low-gold-agreement", "low-consensus-agreement", "mostly-unchanged", "too-fast")
AGREEMENT_FLAGS = ("low-gold-agreement", "low-consensus-agreement")


@dataclass
class QualityConfig:
    """Thresholds of the annotator flags."""

    min_gold_tau: float = field(
        default=0.3,
        metadata={"help": "Flag an annotator whose mean Kendall tau-b with the gold answers is below this."},
    )
    min_consensus_tau: float = field(
        default=0.2,
        metadata={
            "help": "Flag an annotator whose mean Kendall tau-b with the others' consensus (leave-one-out)"
            " is below this."
        },
    )
    max_unchanged: float = field(
        default=0.5,
        metadata={
            "help": "Flag an annotator when more than this share of their rankings is the order shown, untouched."
        },
    )
    min_seconds: float = field(
        default=4.0,
        metadata={
            "help": "Flag an annotator whose median time per task (Label Studio's lead_time) is below"
            " this many seconds."
        },
    )
    min_measured: int = field(
        default=3,
        metadata={"help": "A flag needs at least this many rankings behind it (gold, consensus, timed or all)."},
    )

    def __post_init__(self) -> None:
        for name in ("min_gold_tau", "min_consensus_tau"):
            if not -1 <= getattr(self, name) <= 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be between -1 and 1 (Kendall tau-b)")
        if not 0 <= self.max_unchanged <= 1:
            raise ConfigError("--max-unchanged must be a share between 0 and 1")
        if self.min_seconds < 0:
            raise ConfigError("--min-seconds must not be negative")
        if self.min_measured < 1:
            raise ConfigError("--min-measured must be at least 1")


@dataclass
class AnnotatorQuality:
    """One annotator's numbers and flags (flag -> the reason, said in words), within one criterion."""

    annotator_id: int
    pseudonym: str
    rankings: int = 0
    gold: Agreement = field(default_factory=Agreement)
    consensus: Agreement = field(default_factory=Agreement)
    unchanged: int = 0  # rankings identical to the order shown
    shown_known: int = 0  # rankings whose order shown is known
    lead_times: list[float] = field(default_factory=list)
    flags: dict[str, str] = field(default_factory=dict)
    criterion: str = OVERALL

    @property
    def unchanged_share(self) -> float | None:
        return self.unchanged / self.shown_known if self.shown_known else None

    @property
    def median_seconds(self) -> float | None:
        return statistics.median(self.lead_times) if self.lead_times else None

    def as_dict(self) -> dict[str, Any]:
        gold, consensus = self.gold.as_dict(), self.consensus.as_dict()
        return {
            "annotator": self.pseudonym,
            "criterion": self.criterion,
            "rankings": self.rankings,
            "gold_rankings": gold["ranking_pairs"],
            "gold_tau": gold["kendall_tau"],
            "gold_pairwise": gold["pairwise_agreement"],
            "consensus_rankings": consensus["ranking_pairs"],
            "consensus_tau": consensus["kendall_tau"],
            "consensus_pairwise": consensus["pairwise_agreement"],
            "same_as_shown": self.unchanged_share,
            "timed_rankings": len(self.lead_times),
            "median_seconds": self.median_seconds,
            "flags": dict(self.flags),
        }


def _flag(q: AnnotatorQuality, config: QualityConfig) -> None:
    enough = config.min_measured
    gold, consensus = q.gold.as_dict()["kendall_tau"], q.consensus.as_dict()["kendall_tau"]
    if len(q.gold.taus) >= enough and gold < config.min_gold_tau:
        q.flags["low-gold-agreement"] = (
            f"agrees with gold at tau-b {gold:.2f}, below {config.min_gold_tau:.2f} ({len(q.gold.taus)} gold rankings)"
        )
    if len(q.consensus.taus) >= enough and consensus < config.min_consensus_tau:
        q.flags["low-consensus-agreement"] = (
            f"agrees with the others' consensus at tau-b {consensus:.2f}, below {config.min_consensus_tau:.2f}"
            f" ({len(q.consensus.taus)} rankings)"
        )
    share = q.unchanged_share
    if q.shown_known >= enough and share > config.max_unchanged:
        q.flags["mostly-unchanged"] = (
            f"{share:.0%} of rankings are the order shown, untouched (more than {config.max_unchanged:.0%})"
        )
    median = q.median_seconds
    if len(q.lead_times) >= enough and median < config.min_seconds:
        q.flags["too-fast"] = f"median {median:.1f} s per task, under {config.min_seconds:g} s"


class QualityTally:
    """`annotator_quality` of one criterion, a block of ranked items at a time (see `preflab.db.quality.consensus`).

    The report feeds it the blocks its agreement section reads already (of the same criterion);
    blocks may hold AI judges' rows too: only people's are measured.
    """

    def __init__(self, session: Session, criterion: str = OVERALL):
        import numpy as np

        self.criterion = criterion
        valid = (
            Ranking.status == RankingStatus.valid.value,
            Ranking.criterion == criterion,
            Annotator.kind == AnnotatorKind.human.value,
        )
        self.people: dict[int, AnnotatorQuality] = {}
        for aid, pseudonym, n, known, unchanged in session.execute(
            select(
                Annotator.id,
                Annotator.pseudonym,
                func.count(),
                func.count(Ranking.same_as_shown),
                func.sum(case((Ranking.same_as_shown.is_(True), 1), else_=0)),
            )
            .join(Ranking, Ranking.annotator_id == Annotator.id)
            .where(*valid)
            .group_by(Annotator.id, Annotator.pseudonym)
            .order_by(Annotator.id)
        ):
            self.people[aid] = AnnotatorQuality(
                aid, pseudonym, n, unchanged=int(unchanged or 0), shown_known=known, criterion=criterion
            )
        for aid, lead in session.execute(
            select(Ranking.annotator_id, Ranking.lead_time)
            .join(Annotator, Annotator.id == Ranking.annotator_id)
            .where(*valid, Ranking.lead_time.is_not(None))
        ):
            self.people[aid].lead_times.append(lead)
        self.ids = np.array(sorted(self.people), dtype=np.int64)
        # The gold answers of this criterion: rankings are measured against their own criterion's.
        gold = sorted(
            ((pid << 32) | cid, -float(t))
            for pid, tiers in gold_tiers(session, criterion).items()
            for t, tier in enumerate(tiers)
            for cid in tier
        )
        self.gold_keys = np.array([k for k, _ in gold], dtype=np.int64)
        self.gold_values = np.array([v for _, v in gold], dtype=np.float64)
        self.gold_prompts = np.unique(self.gold_keys >> 32)

    def add(self, block) -> None:
        """Measure the people's rankings in one block of whole prompts (int64 rows, `consensus.item_blocks`)."""
        import numpy as np

        from preflab.db.quality import consensus as c

        rows = c.by_ranking(block[np.isin(block[:, c.ANNOTATOR], self.ids)])
        multi = c.multi_annotator_prompts(rows)
        if len(multi):
            part = rows[np.isin(rows[:, c.PROMPT], multi)]
            self._tally(c.against(part, c.leave_one_out(part, c.borda_scores(part))), "consensus")
        part = rows[np.isin(rows[:, c.PROMPT], self.gold_prompts)]
        if len(part):
            self._tally(c.against(part, c.gold_reference(part, self.gold_keys, self.gold_values)), "gold")

    def _tally(self, compared, which: str) -> None:
        import numpy as np

        for aid in np.unique(compared.annotator).tolist():
            mine = compared.annotator == aid
            agreement: Agreement = getattr(self.people[aid], which)
            agreement.ranking_pairs += int(mine.sum())
            agreement.shared_pairs += int(compared.strict[mine].sum())
            agreement.agreeing_pairs += int(compared.agreeing[mine].sum())
            agreement.taus.extend(compared.tau[mine & ~np.isnan(compared.tau)].tolist())

    def result(self, config: QualityConfig | None = None) -> list[AnnotatorQuality]:
        """Every person's numbers, flagged by `config`'s thresholds."""
        for q in self.people.values():
            q.flags = {}
            _flag(q, config or QualityConfig())
        return list(self.people.values())


def annotator_quality(
    session: Session, config: QualityConfig | None = None, criterion: str = OVERALL
) -> list[AnnotatorQuality]:
    """Every human annotator with a valid ranking of `criterion`: counts, agreement and flags, by pseudonym."""
    from preflab.db.quality.consensus import item_blocks

    tally = QualityTally(session, criterion)
    for block in item_blocks(session, AnnotatorKind.human.value, criterion=criterion):
        tally.add(block)
    return tally.result(config)


def annotator_quality_by_criterion(
    session: Session, config: QualityConfig | None = None, criterion: str | None = None
) -> dict[str, list[AnnotatorQuality]]:
    """`annotator_quality` of each criterion (`agreement.chosen_criteria`: `criterion`, else every one), by name."""
    return {name: annotator_quality(session, config, name) for name in chosen_criteria(session, criterion)}


def quality_exists(session: Session, criterion: str = OVERALL) -> bool:
    """Whether there is anything to measure in `criterion`: its gold answers, or two or more people."""
    if session.scalar(select(GoldAnswer.id).where(GoldAnswer.criterion == criterion).limit(1)) is not None:
        return True
    people = (
        select(Ranking.annotator_id)
        .join(Annotator, Annotator.id == Ranking.annotator_id)
        .where(
            Annotator.kind == AnnotatorKind.human.value,
            Ranking.status == RankingStatus.valid.value,
            Ranking.criterion == criterion,
        )
        .distinct()
        .limit(2)
        .subquery()
    )
    return session.scalar(select(func.count()).select_from(people)) >= 2


def exclusions(qualities: list[AnnotatorQuality], flags: tuple[str, ...] = FLAGS) -> dict[int, list[str]]:
    """{annotator id: [reasons]} of the annotators raising any of `flags` (what `build_pairs` leaves out)."""
    out = {}
    for q in qualities:
        reasons = [f"{name}: {q.flags[name]}" for name in flags if name in q.flags]
        if reasons:
            out[q.annotator_id] = reasons
    return out


def excluded_annotators(
    session: Session,
    config: QualityConfig | None = None,
    flagged: bool = False,
    min_agreement: float | None = None,
    criterion: str | None = None,
) -> dict[int, list[str]]:
    """Who `pairs build --exclude-flagged` / `--min-agreement X` leaves out, with the reasons.

    `flagged` leaves out every flagged annotator (the thresholds of `config`);
    `min_agreement` those whose tau-b with gold or with the others' consensus is
    below X (both thresholds set to X). Each criterion's numbers are its own: with
    `criterion`, that criterion's flags; without, an annotator flagged in any criterion
    (a reason from a criterion other than `overall` names it).
    """
    config = config or QualityConfig()
    if min_agreement is not None and not -1 <= min_agreement <= 1:
        raise InputError("--min-agreement must be between -1 and 1 (Kendall tau-b)")
    out: dict[int, list[str]] = {}

    def add(found: dict[int, list[str]], name: str) -> None:
        for aid, reasons in found.items():
            out.setdefault(aid, [])
            said = reasons if name == OVERALL else [f"{name}: {r}" for r in reasons]
            out[aid] += [r for r in said if r not in out[aid]]

    for name in chosen_criteria(session, criterion):
        if flagged:
            add(exclusions(annotator_quality(session, config, name)), name)
        if min_agreement is not None:
            strict = replace(config, min_gold_tau=min_agreement, min_consensus_tau=min_agreement)
            add(exclusions(annotator_quality(session, strict, name), AGREEMENT_FLAGS), name)
    return out
