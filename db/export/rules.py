"""What "chosen" means when a store ranks by several criteria: the rules of `preflab export --combine`.

A rule (`CombineRule`, parsed once from its text by `parse_rule`) combines, for one prompt, each criterion's
normalised Borda scores of its candidates (`preflab.db.pairs.build.borda`: a criterion's several annotators
are combined first, as `pairs build --aggregate borda` combines them) into one order, expanded into pairs
with the last build's strategy (`combine_prompt`):

- `mean` and `weighted:a=0.7,b=0.3`: the (weighted) mean of the criteria's Borda scores;
- `lexicographic:a,b`: ordered by a's order, b breaking a's ties (Safe RLHF's preference for safety);
- `agree`: only the pairs every criterion's pairs hold, in the same order.

A pair is of two candidates ranked by every criterion of the rule. The candidate pairs some criterion orders
that the combination gives no pair are counted by why (`DROPPED_REASONS`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from preflab.db.ingest.records import criterion_name
from preflab.db.pairs.build import expand_tiers, tiers_from_scores
from preflab.errors import InputError, Invalid

MEAN, WEIGHTED, LEXICOGRAPHIC, AGREE = "mean", "weighted", "lexicographic", "agree"
RULES = (MEAN, WEIGHTED, LEXICOGRAPHIC, AGREE)
EXAMPLES = "mean, weighted:helpfulness=0.7,harmlessness=0.3, lexicographic:harmlessness,helpfulness or agree"
# Scores closer than this tie, as `pairs build --aggregate borda` ties them (`aggregate_prompt`).
TOLERANCE = 1e-6

NOT_RANKED = "not ranked by every criterion"
DISAGREE = "criteria disagree"
TIED = "tied after combining"
DROPPED_REASONS = (NOT_RANKED, DISAGREE, TIED)

Pair = tuple[int, int, float]  # (chosen, rejected, margin)


@dataclass(frozen=True)
class CombineRule:
    """A parsed `--combine` rule: its name, its criteria (in order) and, for the means, their weights.

    `criteria` is empty for `mean` and `agree` given without a list: every criterion of the export
    (`over` fills them in). Weights are normalised to sum to 1.
    """

    name: str
    criteria: tuple[str, ...] = ()
    weights: tuple[float, ...] = ()

    @property
    def text(self) -> str:
        """The rule as it is written (`weighted:helpfulness=0.7,harmlessness=0.3`)."""
        if self.name == WEIGHTED:
            return f"{self.name}:" + ",".join(f"{c}={w:g}" for c, w in zip(self.criteria, self.weights))
        return f"{self.name}:{','.join(self.criteria)}" if self.criteria else self.name

    def over(self, held: Sequence[str]) -> CombineRule:
        """The rule over the export's criteria `held`: all of them where it names none.

        Raises:
            InputError: it names a criterion the pairs to export do not hold.
        """
        missing = [c for c in self.criteria if c not in held]
        if missing:
            raise InputError(
                f"--combine {self.text} names criterion {missing[0]!r}, which the pairs to export do not hold "
                f"(they hold {', '.join(held) or 'none'})"
            )
        if self.criteria:
            return self
        criteria = tuple(sorted(held))
        weights = tuple(1 / len(criteria) for _ in criteria) if self.name == MEAN else ()
        return CombineRule(self.name, criteria, weights)

    def describe(self) -> str:
        """What the rule does, in one sentence, for the card."""
        named = ", ".join(f"`{c}`" for c in self.criteria)
        if self.name == MEAN:
            return f"each candidate's mean normalised Borda score over {named} orders a prompt's candidates"
        if self.name == WEIGHTED:
            parts = ", ".join(f"`{c}` × {w:g}" for c, w in zip(self.criteria, self.weights))
            return f"each candidate's weighted mean of normalised Borda scores ({parts}) orders them"
        if self.name == LEXICOGRAPHIC:
            then = "; ".join(f"`{c}` breaks the ties left" for c in self.criteria[1:])
            return f"`{self.criteria[0]}` orders a prompt's candidates{'; ' + then if then else ''}"
        return f"a pair is kept only when every criterion ({named}) gives it, in the same order"

    def as_dict(self) -> dict:
        """What a dataset version records of the rule."""
        out = {"rule": self.text, "name": self.name, "criteria": list(self.criteria)}
        if self.weights:
            out["weights"] = dict(zip(self.criteria, self.weights))
        return out


def parse_rule(text: str) -> CombineRule:
    """A `--combine` rule from its text: `mean`, `weighted:a=0.7,b=0.3`, `lexicographic:a,b`, `agree`.

    `mean` and `agree` may name their criteria (`mean:a,b`); without, they take every criterion of the export.
    A weight of 0 leaves its criterion out of a weighted rule.

    Raises:
        InputError: an unknown rule, a criterion that is no criterion's name or named twice, weights
            that are not numbers, negative, or do not sum to a positive number.
    """
    name, colon, rest = text.strip().partition(":")
    name = name.strip()
    if name not in RULES:
        raise InputError(f"unknown --combine rule {text.strip()!r} (expected {EXAMPLES})")
    items = [item.strip() for item in rest.split(",")] if colon else []
    if colon and not all(items):
        raise InputError(f"--combine {text.strip()}: an empty criterion in its list")
    if name == WEIGHTED:
        return _weighted(text.strip(), items)
    if name == LEXICOGRAPHIC and not items:
        raise InputError(
            "--combine lexicographic needs its criteria, the first deciding, as lexicographic:harmlessness,helpfulness"
        )
    criteria = _names(text.strip(), items)
    weights = tuple(1 / len(criteria) for _ in criteria) if name == MEAN and criteria else ()
    return CombineRule(name, criteria, weights)


def _names(text: str, names: Iterable[str]) -> tuple[str, ...]:
    out: list[str] = []
    for name in names:
        try:
            criterion_name(name, f"--combine {text}: {name!r}")
        except Invalid as exc:
            raise InputError(str(exc)) from None
        if name in out:
            raise InputError(f"--combine {text} names criterion {name!r} twice")
        out.append(name)
    return tuple(out)


def _weighted(text: str, items: list[str]) -> CombineRule:
    if not items:
        raise InputError(
            "--combine weighted needs each criterion's weight, as weighted:helpfulness=0.7,harmlessness=0.3"
        )
    named: dict[str, float] = {}
    for item in items:
        criterion, equals, value = (part.strip() for part in item.partition("="))
        if not equals:
            raise InputError(f"--combine {text}: {criterion!r} has no weight (write {criterion}=0.5)")
        try:
            weight = float(value)
        except ValueError:
            raise InputError(f"--combine {text}: the weight of {criterion} must be a number, not {value!r}") from None
        if not math.isfinite(weight) or weight < 0:
            raise InputError(f"--combine {text}: the weight of {criterion} must be a number ≥ 0, not {value}")
        if criterion in named:
            raise InputError(f"--combine {text} names criterion {criterion!r} twice")
        named[_names(text, [criterion])[0]] = weight
    total = sum(named.values())
    if total <= 0:
        raise InputError(f"--combine {text}: the weights must sum to a positive number")
    kept = {c: w / total for c, w in named.items() if w > 0}
    return CombineRule(WEIGHTED, tuple(kept), tuple(kept.values()))


# --- one prompt ------------------------------------------------------------------------------------


def combine_prompt(
    rule: CombineRule, scores: Mapping[str, Mapping[int, float]], strategy: str = "all"
) -> tuple[list[Pair], Counter]:
    """One prompt's combined pairs (chosen, rejected, margin), and the candidate pairs it dropped, by why.

    Args:
        rule: a rule over its criteria (`CombineRule.over`).
        scores: criterion -> candidate -> its normalised Borda score in [0, 1] (the criteria of the rule that
            rank something on this prompt).
        strategy: which pairs of the combined order to keep (`pairs build --strategy`).
    """
    tiers = {c: tiers_from_scores(dict(scores[c]), TOLERANCE) for c in rule.criteria if scores.get(c)}
    place = {c: {item: i for i, tier in enumerate(t) for item in tier} for c, t in tiers.items()}
    covered = set.intersection(*(set(place.get(c, ())) for c in rule.criteria)) if rule.criteria else set()
    if rule.name == AGREE:
        return _agreed(rule, scores, tiers, covered, strategy)
    if rule.name == LEXICOGRAPHIC:
        order = [sorted(covered)]
        for c in rule.criteria:  # each criterion splits the ties the ones before it left
            order = [part for tier in order for part in tiers_from_scores({i: -place[c][i] for i in tier})]
        pairs = [(a, b, _decisive_gap(rule, scores, place, a, b)) for a, b, _ in expand_tiers(order, strategy)]
    else:
        combined = {i: sum(w * scores[c][i] for c, w in zip(rule.criteria, rule.weights)) for i in covered}
        order = tiers_from_scores(combined, TOLERANCE)
        pairs = [(a, b, combined[a] - combined[b]) for a, b, _ in expand_tiers(order, strategy)]
    tier_of = {item: i for i, tier in enumerate(order) for item in tier}
    dropped: Counter = Counter()
    for a, b in _ordered(place):
        if a not in covered or b not in covered:
            dropped[NOT_RANKED] += 1
        elif tier_of[a] == tier_of[b]:
            dropped[TIED] += 1
    return pairs, dropped


def _ordered(place: Mapping[str, Mapping[int, int]]) -> set[tuple[int, int]]:
    """The candidate pairs (low id first) some criterion orders, one way or the other."""
    out: set[tuple[int, int]] = set()
    for places in place.values():
        for a, b in combinations(sorted(places), 2):
            if places[a] != places[b]:
                out.add((a, b))
    return out


def _decisive_gap(rule: CombineRule, scores, place, a: int, b: int) -> float:
    """The Borda gap of the first criterion that orders a over b (the one that decided the pair)."""
    c = next(c for c in rule.criteria if place[c][a] != place[c][b])
    return scores[c][a] - scores[c][b]


def _agreed(rule: CombineRule, scores, tiers, covered: set[int], strategy: str) -> tuple[list[Pair], Counter]:
    """The pairs every criterion's pairs hold in the same order; the smallest criterion's gap is the margin."""
    held = [{(a, b) for a, b, _ in expand_tiers(tiers[c], strategy)} if c in tiers else set() for c in rule.criteria]
    # no criterion (a store whose rankings order nothing), or the first orders nothing here: nothing agreed
    first = [(a, b) for a, b, _ in expand_tiers(tiers[rule.criteria[0]], strategy)] if held and held[0] else []
    kept = [(a, b) for a, b in first if all((a, b) in pairs for pairs in held[1:])]
    pairs = [(a, b, min(scores[c][a] - scores[c][b] for c in rule.criteria)) for a, b in kept]
    agreed = {frozenset(p) for p in kept}
    dropped: Counter = Counter()
    for pair in {frozenset(p) for pairs in held for p in pairs} - agreed:
        dropped[NOT_RANKED if not pair <= covered else DISAGREE] += 1
    return pairs, dropped
