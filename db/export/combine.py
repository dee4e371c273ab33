"""`preflab export --combine RULE`: a store's rankings by several criteria, combined into one set of pairs.

It reads the rankings the last `pairs build` took (`iter_prompt_rankings`, a prompt at a time, grouped
`by_criterion`), keeps those of the export's annotators (`whose`), combines each criterion's annotators of
a prompt by their normalised Borda scores (`borda`, as `pairs build --aggregate borda` does), and the
criteria by the rule (`preflab.db.export.rules.combine_prompt`). So a combined pair is one per prompt and
candidate pair, whatever the build's aggregation. The pairs are kept as Arrow batches of ids (56 bytes a
pair), since the split by prompt needs every prompt before the first pair is written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from preflab.db.export.pair_tables import PairRow, id_schema
from preflab.db.export.rules import CombineRule, combine_prompt
from preflab.db.export.sqlite_reader import rows_to_batch
from preflab.db.pairs.build import MARGIN_DIGITS, borda
from preflab.db.pairs.views import RankedView, by_criterion, iter_prompt_rankings

WITHIN_CRITERION = "borda"  # how one criterion's several annotators of a prompt are combined first


@dataclass
class Combined:
    """A rule's pairs, as Arrow batches of ids (`id_schema()`), and what it kept and dropped."""

    rule: CombineRule
    batches: list = field(default_factory=list)
    prompts: set[int] = field(default_factory=set)  # the prompts with a combined pair
    by_kind: Counter = field(default_factory=Counter)  # annotator kind (human, ai, mixed) -> pairs
    dropped: Counter = field(default_factory=Counter)  # why (`rules.DROPPED_REASONS`) -> candidate pairs

    @property
    def n(self) -> int:
        return sum(batch.num_rows for batch in self.batches)


def whose(views: Sequence[RankedView], annotators: str) -> list[RankedView]:
    """One prompt's rankings of one criterion that an export of `annotators` (`EXPORT_KINDS`) takes.

    `human-first` takes a judge's only where no person's ranking of this criterion gives a pair, as the
    comparisons' `kept_comparisons` does.
    """
    if annotators == "any":
        return list(views)
    if annotators in ("human", "ai"):
        return [v for v in views if v.kind == annotators]
    people = any(v.kind == "human" and len(v.tiers) > 1 for v in views)
    return [v for v in views if not (people and v.kind == "ai")]


def combined_pairs(
    session: Session, rule: CombineRule, annotators: str, strategy: str = "all", batch_rows: int = 20_000
) -> Combined:
    """Every prompt's pairs under `rule` (over its criteria: `CombineRule.over`), of the rankings the last build took.

    Args:
        annotators: whose rankings (`EXPORT_KINDS`), chosen per prompt and criterion (`whose`).
        strategy: which pairs of each combined order to keep (the last build's).
    """
    out = Combined(rule)
    schema = id_schema()
    rows: list[PairRow] = []
    for prompt_id, views in iter_prompt_rankings(session, in_pairs_from=0):
        groups = by_criterion(views)
        used = {c: whose(groups[c], annotators) for c in rule.criteria if c in groups}
        used = {c: vs for c, vs in used.items() if vs}
        pairs, dropped = combine_prompt(rule, {c: borda([v.tiers for v in vs]) for c, vs in used.items()}, strategy)
        out.dropped.update(dropped)
        if not pairs:
            continue
        taken = [v for vs in used.values() for v in vs]
        kinds, who = {v.kind for v in taken}, {v.annotator_id for v in taken}
        kind = kinds.pop() if len(kinds) == 1 else "mixed"
        annotator = who.pop() if len(who) == 1 else None  # None: an aggregate of several annotators
        out.prompts.add(prompt_id)
        out.by_kind[kind] += len(pairs)
        rows.extend((prompt_id, a, b, round(margin, MARGIN_DIGITS), 1.0, kind, annotator) for a, b, margin in pairs)
        if len(rows) >= batch_rows:
            out.batches.append(rows_to_batch(rows, schema))
            rows = []
    if rows:
        out.batches.append(rows_to_batch(rows, schema))
    return out
