"""The laws of datasets that rate several things: one ranking per row and criterion, whatever the file.

On generated UltraFeedback rows (every aspect rated, now and then "N/A") and HelpSteer2 prompts (two or three
rated replies each), on SQLite and Postgres:

- **One per row and criterion.** An import, from any encoding of the rows, stores exactly one ranking for each
  row (HelpSteer2: each prompt) and each criterion its parse ranks it by, and none for the others; importing
  it again, or another encoding of it, adds nothing and changes nothing.
- **Split.** Importing each criterion alone (`--criterion`, in any order) and then every criterion at once
  adds nothing at the end, and the store (rankings, pairs, export, leaderboard: `law_store.snapshot`) is the
  one a single import of every criterion makes.
- **An "N/A" is local.** Unrating one completion for one aspect changes that row's ranking by that aspect
  alone (the completion leaves it), and no other ranking.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preflab.db.conversation import prompt_hash, prompt_messages, reply_hash, reply_messages
from preflab.db.ingest.datasets.formats import FORMATS
from preflab.db.ingest.datasets.job import DatasetImportSettings, import_dataset
from preflab.db.ingest.datasets.ultrafeedback import ASPECTS
from preflab.errors import Invalid
from tests.db.ingest.law_rows import GROUPED, helpsteer2_prompts, ultrafeedback_rows
from tests.db.ingest.law_store import emptied, encodings, jsonl, rankings, same, snapshot
from tests.properties import examples

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

SEVERAL = ("ultrafeedback", "helpsteer2")


@st.composite
def rows_of(draw, fmt: str) -> list:
    """A few rows (HelpSteer2: prompts, each a list of rows), each with a prompt of its own."""
    n = draw(st.integers(2, 4))
    if fmt == "helpsteer2":
        return [draw(helpsteer2_prompts(i)) for i in range(n)]
    return [draw(ultrafeedback_rows(i, prompts=(f"Question {i}?",))) for i in range(n)]


def flat(fmt: str, rows: list) -> list:
    return [r for group in rows for r in group] if fmt in GROUPED else rows


def expected(fmt: str, rows: list) -> Counter:
    """(prompt hash, criterion) of each ranking the rows' own parse gives, each once."""
    out = Counter()
    for row in rows:
        try:
            records = FORMATS[fmt].parse(row)
        except Invalid:
            continue
        out.update((record.prompt_hash, record.criterion) for record in records)
    return out


def stored(sessions) -> Counter:
    """(prompt hash, criterion) of each stored ranking: a Counter, so one stored twice shows twice."""
    with sessions.begin() as s:
        return Counter((prompt, criterion) for _, _, criterion, _, prompt, *_ in rankings(s).elements())


def imported(sessions, fmt: str, path: Path, criterion: str | None = None) -> int:
    return import_dataset(sessions, str(path), DatasetImportSettings(format=fmt, criterion=criterion)).rankings


@pytest.mark.parametrize("fmt", SEVERAL)
@settings(max_examples=examples(3))
@given(data=st.data())
def test_one_ranking_per_row_and_criterion_in_any_encoding(sessions, tmp_path_factory, fmt, data):
    rows = data.draw(rows_of(fmt))
    files = encodings(fmt, rows, fmt in {"helpsteer2"}, tmp_path_factory.mktemp("rows"))
    first, second = data.draw(st.permutations(sorted(files)))[:2]
    emptied(sessions)
    want = expected(fmt, rows)
    assert imported(sessions, fmt, files[first]) == sum(want.values())
    assert stored(sessions) == want and set(want.values()) <= {1}, first
    with sessions.begin() as s:
        before = rankings(s)
    for name in (first, second):  # again, and in another encoding: nothing added, nothing changed
        assert imported(sessions, fmt, files[name]) == 0, name
        with sessions.begin() as s:
            assert rankings(s) == before, name


@pytest.mark.parametrize("fmt", SEVERAL)
@settings(max_examples=examples(3))
@given(data=st.data())
def test_each_criterion_alone_then_all_equals_one_import_of_all(sessions, tmp_path_factory, fmt, data):
    rows = data.draw(rows_of(fmt))
    folder = tmp_path_factory.mktemp("rows")
    path = jsonl(folder / "rows.jsonl", flat(fmt, rows))
    emptied(sessions)
    imported(sessions, fmt, path)
    want = snapshot(sessions, folder / "export-all")

    emptied(sessions)
    for criterion in data.draw(st.permutations(FORMATS[fmt].criteria)):
        imported(sessions, fmt, path, criterion)
    assert imported(sessions, fmt, path) == 0
    assert same(snapshot(sessions, folder / "export-split"), want)


@st.composite
def unrated_once(draw) -> tuple[list[dict], list[dict], int, str, int]:
    """Rows rated by every aspect, the same rows with one completion's rating of one aspect "N/A", and which:
    (rows, changed rows, row, aspect, completion)."""
    rows = draw(rows_of("ultrafeedback"))
    for row in rows:  # every completion rated to begin with
        for completion in row["completions"]:
            for rating in completion["annotations"].values():
                rating["Rating"] = draw(st.sampled_from("12345"))
    r = draw(st.integers(0, len(rows) - 1))
    aspect = draw(st.sampled_from(ASPECTS))
    k = draw(st.integers(0, len(rows[r]["completions"]) - 1))
    changed = [
        dict(row, completions=[dict(c, annotations=dict(c["annotations"])) for c in row["completions"]]) for row in rows
    ]
    changed[r]["completions"][k]["annotations"][aspect] = {"Rating": "N/A", "Rationale": "ok"}
    return rows, changed, r, aspect, k


@settings(max_examples=examples(5))
@given(case=unrated_once())
def test_an_na_in_one_aspect_changes_only_that_criterion_s_ranking(sessions, tmp_path_factory, case):
    rows, changed, r, aspect, k = case
    folder = tmp_path_factory.mktemp("rows")
    prompt = prompt_hash(prompt_messages(rows[r]["instruction"]))
    reply = reply_hash(reply_messages(rows[r]["completions"][k]["response"], "reply"))

    def store(these: list[dict]) -> tuple[Counter, list]:
        """The rankings, but the one of row r by the aspect; and that one's replies (none: no ranking)."""
        emptied(sessions)
        imported(sessions, "ultrafeedback", jsonl(folder / "rows.jsonl", these))
        with sessions.begin() as s:
            every = rankings(s)
        touched = [key for key in every if key[2] == aspect and key[4] == prompt]
        rest = Counter({key: n for key, n in every.items() if key not in touched})
        return rest, [text for key in touched for text, *_ in key[6]]  # (text hash, tier, score, model) each

    rest, replies = store(rows)
    assert reply in replies  # rated by the aspect, the completion is in its ranking
    rest_after, replies_after = store(changed)
    assert rest_after == rest
    assert reply not in replies_after
    assert replies_after == [] or sorted(replies_after) == sorted(h for h in replies if h != reply)
