"""The laws of a multi-objective run's data (`preflab.training.criteria`), on generated stores, SQLite and Postgres.

A criteria version of harmlessness and helpfulness, made from each criterion's own dataset version
(`export --criterion`, as a run exports it):

- holds every pair of each criterion's version exactly once, under that criterion, and nothing else;
- holds no prompt in both splits, and every prompt a criterion held out is held out (the store says so too);
- is one version: resolving it again, or with the criteria in the other order, gives the same version.

Pairs are compared as (criterion, prompt, chosen, rejected) texts; a store is emptied between examples.
"""

from __future__ import annotations

import json
from collections import Counter

from hypothesis import given, settings
from sqlalchemy import select

from preflab.db.export.selection import held_criteria
from preflab.db.models import DatasetVersion, Prompt
from tests.db.export.criteria_store import stored, stores
from tests.properties import examples

CRITERIA = ["harmlessness", "helpfulness"]


def text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def pairs(splits, criterion: str | None = None) -> Counter:
    """(criterion, prompt, chosen, rejected) of every pair of a DatasetDict, and its split."""
    return Counter(
        (criterion or row["criterion"], text(row["prompt"]), text(row["chosen"]), text(row["rejected"]), name)
        for name, split in splits.items()
        for row in split
    )


@settings(max_examples=examples(10))
@given(stores())
def test_a_criteria_version_holds_each_criterions_pairs_once_and_splits_by_prompt(sessions, tmp_path, rankings):
    from preflab.training.criteria import resolve_criteria_version
    from preflab.training.data import load_splits

    stored(sessions, tmp_path, rankings)
    with sessions.begin() as session:
        if held_criteria(session) != CRITERIA:
            return  # a criterion with no pair: its export refuses (tests/training/test_train_criteria.py)
        merged, wrote = resolve_criteria_version(session, CRITERIA)
        parts = {
            c: session.scalar(select(DatasetVersion).where(DatasetVersion.name == name))
            for c, name in merged.settings["criteria"].items()
        }
        held_out_in_store = set(session.scalars(select(Prompt.id).where(Prompt.split == "test")))
    assert wrote and set(parts) == set(CRITERIA)
    splits = load_splits(merged.path)
    mine = pairs(splits)
    # Each criterion's pairs, exactly once; a pair may change split (to test), never criterion or texts.
    theirs = Counter()
    for criterion, part in parts.items():
        theirs.update(pairs(load_splits(part.path), criterion))
    assert Counter(p[:4] for p in mine.elements()) == Counter(p[:4] for p in theirs.elements())
    assert merged.n_train + merged.n_test == sum(p.n_train + p.n_test for p in parts.values())
    # No prompt in both splits; a prompt held out by either criterion is held out.
    train, test = (set(splits[s]["prompt_id"]) if s in splits else set() for s in ("train", "test"))
    assert not train & test
    for part in parts.values():
        part_splits = load_splits(part.path)
        if "test" in part_splits:
            assert set(part_splits["test"]["prompt_id"]) <= test
    assert test <= held_out_in_store
    assert merged.settings["moved_to_test"] == len(
        {p for part in parts.values() for p in load_splits(part.path)["train"]["prompt_id"]} & test
    )
    # One version, whatever order the criteria are named in.
    with sessions.begin() as session:
        for order in (CRITERIA, CRITERIA[::-1]):
            again, wrote_again = resolve_criteria_version(session, order)
            assert (again.id, wrote_again) == (merged.id, False)
