"""Criteria of a Label Studio project: their names checked, their descriptions read, a Ranker's criterion.

The template side (a Ranker per criterion, the built-in descriptions) is `preflab.templates.criteria`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from preflab.db.ingest.records import criterion_name
from preflab.db.models import OVERALL
from preflab.errors import InputError, Invalid
from preflab.templates import RANKER
from preflab.templates.criteria import RANKER_PREFIX, described


def ranker_criterion(name: str, alone: bool = True) -> str:
    """The criterion a Ranker named `name` ranks by; raises Invalid when its name says none.

    `rank` is overall, `rank_<criterion>` is that criterion; any other name is
    overall when it is the annotation's only Ranker (a project preflab did not make).
    """
    if name == RANKER:
        return OVERALL
    if name.startswith(RANKER_PREFIX):
        return criterion_name(name[len(RANKER_PREFIX) :], f"the criterion of ranker {name!r}")
    if alone:
        return OVERALL
    raise Invalid(f"ranker {name!r} names no criterion (preflab reads several rankers named rank_<criterion>)")


def criteria_descriptions(criteria: Iterable[str], given: Mapping[str, str] | None = None) -> dict[str, str]:
    """Each criterion's description (given, else built in), its name checked; raises InputError naming what is wrong."""
    criteria = list(criteria)
    for name in criteria:
        try:
            criterion_name(name, "--criterion")
        except Invalid as exc:
            raise InputError(str(exc)) from exc
    return described(criteria, given)
