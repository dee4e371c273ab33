"""Label Studio annotation results → tiers of item ids, one ranking per criterion (pure functions).

An annotation's result is read in every shape Label Studio has written:

- Ranker: `{"ranker": {"<ranker name>": [ids]}}`, the pre-2023 `{"ranker": [ids]}`,
  and bucket mode `{"ranker": {"<bucket>": [ids], …, "_": [unranked]}}` where the
  buckets are tiers in the template's order (never in the order written: without
  the template, a bucket ranking is refused, not guessed). Each tier keeps its
  bucket's position: Tier 1 and Tier 3 with Tier 2 left empty are two tiers
  apart, as the annotator placed them (their pair's margin is 2, not 1);
- several Rankers, one per criterion (`preflab.templates.criteria`): each ranker's
  result is a ranking of its criterion (`rank` is overall, `rank_<criterion>` that
  criterion), read with that ranker's buckets. A ranker left empty (every response
  still unranked) is a criterion not answered: the others are kept;
- Pairwise: `{"selected": "left" | "right"}`, with an optional "Tie" choice;
- a skipped (cancelled) annotation: skipped for every criterion of the template.

Anything else raises `Invalid` with the reason it is quarantined for.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from preflab.db.models.rankings import OVERALL
from preflab.errors import Invalid
from preflab.labelling.studio.criteria import ranker_criterion
from preflab.templates import RANKER

UNRANKED_BUCKET = "_"
# A ranker's buckets: the same for every ranker (a list), or each ranker's by its name (`ranker_buckets`).
Buckets = Sequence[str] | Mapping[str, Sequence[str]]


@dataclass(frozen=True)
class Parsed:
    """One annotation's ranking by one criterion: tiers of item ids, best first (empty when skipped)."""

    tiers: tuple[tuple[str, ...], ...]
    skipped: bool = False
    shape: str = "ranker"  # ranker | ranker-legacy | buckets | pairwise | skipped
    # Buckets: each tier's position among the template's buckets (0 = best), gaps kept; else None.
    positions: tuple[int, ...] | None = None
    criterion: str = OVERALL

    def tier_positions(self) -> tuple[int, ...]:
        """The position to store each tier at: its bucket's, or its rank among the tiers."""
        return self.positions if self.positions is not None else tuple(range(len(self.tiers)))

    @property
    def ranked(self) -> set[str]:
        return {i for tier in self.tiers for i in tier}


def _value(result: dict) -> dict:
    value = result.get("value")
    return value if isinstance(value, dict) else {}


def _check_ids(ids: Any, known: Sequence[str], seen: set[str], where: str) -> tuple[str, ...]:
    if not isinstance(ids, list):
        raise Invalid(f"ranker {where} is {type(ids).__name__}, not a list of item ids")
    out = []
    for raw in ids:
        if not isinstance(raw, (str, int)) or isinstance(raw, bool):
            raise Invalid(f"ranker {where} holds {raw!r}, not an item id")
        item = str(raw)
        if item not in known:
            raise Invalid(f"unknown item id {item!r} in ranker {where}")
        if item in seen:
            raise Invalid(f"item {item!r} is ranked twice")
        seen.add(item)
        out.append(item)
    return tuple(out)


def bucket_keys(ranker: Any, buckets: Sequence[str] = ()) -> list[str] | None:
    """The bucket names a ranker value ranks with, in the order written; None for a plain ranking.

    A value with a single key is a plain ranking named by that key, unless `buckets`
    (the template's) holds it; several keys, or the unranked column `_`, are buckets.
    """
    if not isinstance(ranker, dict) or not ranker:
        return None
    keys = list(ranker)
    if len(keys) == 1 and keys[0] != UNRANKED_BUCKET and keys[0] not in buckets:
        return None
    return [str(k) for k in keys if k != UNRANKED_BUCKET]


def unknown_bucket_order(names: Sequence[str]) -> str:
    """Why bucket tiers cannot be read without the template: the order Label Studio writes them in is not theirs."""
    return (
        f"the ranker's buckets ({', '.join(names)}) are tiers whose order only the labelling config "
        f"knows: pass --buckets BEST,…,WORST or --label-config"
    )


def _ranker(result: dict, known: Sequence[str], buckets: Sequence[str] | None) -> Parsed:
    ranker = _value(result).get("ranker")
    seen: set[str] = set()
    if isinstance(ranker, list):  # before 2023: {"ranker": [ids]}
        order = _check_ids(ranker, known, seen, "list")
        return Parsed(tuple((i,) for i in order), shape="ranker-legacy")
    if not isinstance(ranker, dict) or not ranker:
        raise Invalid(f"unrecognised ranker value {json.dumps(ranker, default=str)[:80]}")
    bucket_order = list(buckets or [])
    names = bucket_keys(ranker, bucket_order)
    if names is None:
        (name,) = ranker
        order = _check_ids(ranker[name], known, seen, repr(name))
        return Parsed(tuple((i,) for i in order), shape="ranker")
    if not bucket_order:
        # Label Studio writes buckets in no meaningful order (alphabetical, in its exports):
        # taking them as written would record preferences backwards. Never guess.
        raise Invalid(unknown_bucket_order(names))
    unknown = [k for k in names if k not in bucket_order]
    if unknown:
        raise Invalid(f"unknown bucket {unknown[0]!r} (the template's buckets: {', '.join(bucket_order)})")
    tiers, positions = [], []
    for position, name in enumerate(bucket_order):
        ids = _check_ids(ranker.get(name, []), known, seen, f"bucket {name!r}")
        if ids:
            tiers.append(ids)
            positions.append(position)
    _check_ids(ranker.get(UNRANKED_BUCKET, []), known, seen, "unranked column")
    return Parsed(tuple(tiers), shape="buckets", positions=tuple(positions))


def _pairwise(pairwise: dict | None, tie: bool, known: Sequence[str]) -> Parsed:
    if len(known) != 2:
        raise Invalid(f"a pairwise result needs a task with two items, not {len(known)}")
    left, right = known
    if tie:
        return Parsed(((left, right),), shape="pairwise")
    selected = _value(pairwise).get("selected")
    if selected == "left":
        return Parsed(((left,), (right,)), shape="pairwise")
    if selected == "right":
        return Parsed(((right,), (left,)), shape="pairwise")
    raise Invalid(f"pairwise selected {selected!r}, not 'left' or 'right'")


def _is_tie(result: dict) -> bool:
    choices = _value(result).get("choices")
    return isinstance(choices, list) and any(isinstance(c, str) and c.strip().lower() == "tie" for c in choices)


def _ranker_name(result: dict) -> str:
    name = result.get("from_name")
    return name if isinstance(name, str) and name else RANKER


def _buckets_of(buckets: Buckets | None, name: str) -> Sequence[str] | None:
    if isinstance(buckets, Mapping):
        return buckets.get(name)
    return buckets


def _rankings(rankers: list[dict], known: Sequence[str], buckets: Buckets | None) -> tuple[Parsed, ...]:
    """One ranking per ranker result, under the criterion its ranker's name says; the empty ones left out."""
    names = [_ranker_name(r) for r in rankers]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise Invalid(f"several results of ranker {twice!r} in one annotation")
    # One ranker, of a config with one (or unknown): overall whatever its name (a project preflab did not make).
    alone = len(names) == 1 and (not isinstance(buckets, Mapping) or len(buckets) <= 1)
    out: dict[str, Parsed] = {}
    for r, name in zip(rankers, names):
        criterion = ranker_criterion(name, alone)
        if criterion in out:
            raise Invalid(f"two rankers rank by {criterion!r} in one annotation")
        parsed = _ranker(r, known, _buckets_of(buckets, name))
        if parsed.tiers:  # a ranker left empty: that criterion was not answered
            out[criterion] = replace(parsed, criterion=criterion)
    return tuple(out.values())


def parse_rankings(annotation: Any, known: Sequence[str], buckets: Buckets | None = None) -> tuple[Parsed, ...]:
    """The rankings of one annotation, one per criterion it answers; raises Invalid with the quarantine reason.

    Args:
        annotation: the annotation object as Label Studio wrote it.
        known: the task's item ids as shown (see `task_items`).
        buckets: the template's bucket names in order, when it has buckets; or each Ranker's
            (`preflab.templates.ranker_buckets`), which names the template's criteria too.
    """
    if not isinstance(annotation, dict):
        raise Invalid("annotation is not an object")
    if annotation.get("was_cancelled"):
        names = list(buckets) if isinstance(buckets, Mapping) and len(buckets) > 1 else [RANKER]
        criteria = dict.fromkeys(ranker_criterion(n, len(names) == 1) for n in names)
        return tuple(Parsed((), skipped=True, shape="skipped", criterion=c) for c in criteria)
    result = annotation.get("result")
    if not isinstance(result, list):
        raise Invalid("annotation has no result list")
    if not result:
        raise Invalid("empty result: nothing was ranked")
    rankers, pairwise, tie, other = [], [], False, set()
    for r in result:
        if not isinstance(r, dict):
            raise Invalid("a result entry is not an object")
        kind, value = r.get("type"), _value(r)
        if kind == "ranker" or "ranker" in value:
            rankers.append(r)
        elif kind == "pairwise" or "selected" in value:
            pairwise.append(r)
        elif kind == "choices" and _is_tie(r):
            tie = True
        else:
            other.add(str(kind))
    if len(pairwise) > 1:
        raise Invalid("several pairwise results in one annotation")
    if rankers and pairwise:
        raise Invalid("both a ranker and a pairwise result in one annotation")
    if rankers:
        parsed = _rankings(rankers, known, buckets)
    elif pairwise or tie:
        parsed = (_pairwise(pairwise[0] if pairwise else None, tie, known),)
    else:
        raise Invalid(f"no ranker or pairwise result (result types: {', '.join(sorted(other)) or 'none'})")
    if not any(p.tiers for p in parsed):
        raise Invalid("empty ranking: no response was put in a tier")
    return parsed


def parse_annotation(annotation: Any, known: Sequence[str], buckets: Buckets | None = None) -> Parsed:
    """The one ranking of an annotation of a single-criterion template (see `parse_rankings`)."""
    parsed = parse_rankings(annotation, known, buckets)
    if len(parsed) > 1:
        raise Invalid(f"several rankings in one annotation ({', '.join(p.criterion for p in parsed)})")
    return parsed[0]


def same_as_shown(parsed: Parsed, shown: Sequence[str]) -> bool:
    """Whether a ranking is exactly the order shown: the annotator may not have moved anything."""
    if parsed.skipped or parsed.shape == "pairwise":
        return False  # a pairwise choice has no default to leave untouched
    return all(len(t) == 1 for t in parsed.tiers) and [t[0] for t in parsed.tiers] == list(shown)
