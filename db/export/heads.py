"""A reward model's scores by criterion, one order from them: the export's `--combine` rules over a model's heads.

A multi-objective reward model scores a reply once per head: a vector, one score per criterion
(`preflab.lm.scoring.reward_vectors`). Where one order is needed (best-of-n's pick, a judge's
ranking, a bench's verdict on a pair), the vectors of a group of candidates (a prompt's replies)
are combined by the export's rules (`preflab.db.export.rules`), the way the export combines a
prompt's rankings (`combine_scores`):

1. each head's scores make its criterion's tiers: a tier holds the candidates within
   `tie_margin` of its best score (a head learns differences, and a gap that small is no
   verdict: a cost model's two safe replies are equally safe);
2. each criterion's tiers give the candidates their normalised Borda scores;
3. `combine_prompt`, the export's own code, orders the candidates by the rule;
4. a candidate's combined score is its normalised Borda score in that order: 0 … 1, ties equal.

So `lexicographic:harmlessness,helpfulness` picks the most helpful of the safest replies,
and `mean` the reply best on average over the criteria's orders, as in the export.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

from preflab.db.export.rules import CombineRule, combine_prompt, parse_rule
from preflab.db.pairs.build import borda
from preflab.errors import InputError

# In reward units: a head less sure than σ(1) ≈ 0.73 that one reply beats another ties them.
TIE_MARGIN = 1.0


def heads_rule(text: str, criteria: Sequence[str], model: str = "the reward model") -> CombineRule:
    """The `--combine` rule `text` over a model's heads (`mean` and `agree` without a list: every head).

    Raises:
        InputError: the rule does not parse, or names a criterion the model has no head for.
    """
    rule = parse_rule(text)
    missing = [c for c in rule.criteria if c not in criteria]
    if missing:
        raise InputError(
            f"{rule.text} names criterion {missing[0]!r}, which {model} has no head for "
            f"(its heads: {', '.join(criteria) or 'one, unnamed'})"
        )
    return rule.over(criteria)


def margin_tiers(scores: dict[int, float], margin: float) -> list[list[int]]:
    """Tiers of items by score, best first: each holds the items within `margin` of its best."""
    tiers: list[list[int]] = []
    top = None
    for item, score in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0])):
        if top is not None and top - score <= margin:
            tiers[-1].append(item)
        else:
            tiers.append([item])
            top = score
    return tiers


def combine_group(
    rule: CombineRule, criteria: Sequence[str], vectors: Sequence[Sequence[float]], tie_margin: float = TIE_MARGIN
) -> list[float]:
    """One group's (a prompt's candidates') combined scores under `rule` (over `criteria`, the heads in order).

    Returns:
        Each candidate's normalised Borda score in the rule's order of the group (0.5 for a group of one).
    """
    n = len(vectors)
    if n < 2:
        return [0.5] * n
    column = {name: k for k, name in enumerate(criteria)}
    scores = {
        c: borda([margin_tiers({i: float(v[column[c]]) for i, v in enumerate(vectors)}, tie_margin)])
        for c in rule.criteria
    }
    pairs, _ = combine_prompt(rule, scores)
    wins, losses = [0] * n, [0] * n
    for chosen, rejected, _ in pairs:
        wins[chosen] += 1
        losses[rejected] += 1
    return [(wins[i] + 0.5 * (n - 1 - wins[i] - losses[i])) / (n - 1) for i in range(n)]


def combine_scores(
    rule: CombineRule,
    criteria: Sequence[str],
    vectors: Sequence[Sequence[float]],
    groups: Sequence[Hashable],
    tie_margin: float = TIE_MARGIN,
) -> list[float]:
    """Every candidate's combined score (`combine_group`), each within its group: `groups[i]` is candidate i's
    group (its prompt), and candidates of different groups are never compared."""
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, group in enumerate(groups):
        members[group].append(i)
    out = [0.0] * len(vectors)
    for indices in members.values():
        for i, score in zip(indices, combine_group(rule, criteria, [vectors[i] for i in indices], tie_margin)):
            out[i] = score
    return out


def heads_reader(
    names: Sequence[str],
    count: int,
    head: str | None,
    combine: str | None,
    *,
    model: str = "the reward model",
    options: tuple[str, str | None] = ("--head NAME", "--combine RULE"),
):
    """How one group's vectors (a prompt's candidates', one per candidate) become their scores.

    A model of one head takes neither a head nor a rule (None: read its one score); a model of several needs
    one of them: `head` reads that head, `combine` orders the group by the rule (`combine_group`).

    Args:
        names, count: the model's head names (`preflab.lm.loading.head_names`) and its number of labels.
        options: how the caller's command names the head and the rule (None: it takes no rule), for its errors.

    Raises:
        ConfigError: a head or rule for a model of one head, neither for several, a head it does not have.
        InputError: a rule that does not parse, or names a criterion the model has no head for.
    """
    from preflab.errors import ConfigError

    if count == 1:
        if head is not None or combine is not None:
            raise ConfigError(f"{model} has one head: it takes no {' or '.join(o for o in options if o)}")
        return None
    if head is None and combine is None:
        how = f"read one with {options[0]}" + (f", or combine them with {options[1]}" if options[1] else "")
        raise ConfigError(f"{model} has {count} heads ({', '.join(names) or 'unnamed'}): {how}")
    if head is not None:
        if head not in names:
            raise ConfigError(f"{model} has no head {head!r} (its heads: {', '.join(names) or 'unnamed'})")
        index = names.index(head)
        return lambda vectors: [float(v[index]) for v in vectors]
    rule = heads_rule(combine, names, model)
    return lambda vectors: combine_group(rule, names, vectors)
