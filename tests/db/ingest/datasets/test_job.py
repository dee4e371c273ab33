"""The import job every format shares: raw first, quarantine and go on, idempotent, batches, auto, the stop line."""

import gzip

import pytest
from sqlalchemy import select

from preflab.db.ingest.datasets.job import DatasetImportSettings, import_dataset
from preflab.db.models import RawRecord
from preflab.errors import InputError
from tests.db.ingest.datasets import test_hh, test_nectar, test_oasst2, test_pku, test_shp, test_trl
from tests.db.ingest.datasets.shapes_b import quarantined, run_import, stored, write_jsonl, write_parquet

HH = test_hh.ROWS[:3]


def raw_rows(sessions):
    with sessions.begin() as s:
        return [(r.source, r.locator, r.payload, r.status) for r in s.scalars(select(RawRecord).order_by(RawRecord.id))]


def test_every_row_is_stored_raw_with_its_split_and_index(sessions, tmp_path):
    path = tmp_path / "hh.jsonl"
    lines = [write_jsonl(tmp_path / "x.jsonl", [row]).read_text().strip() for row in HH] + ["{not json"]
    path.write_text("\n".join(lines) + "\n")
    summary = run_import(sessions, path, "hh-rlhf")
    assert (summary.rows, summary.rankings, summary.quarantined, summary.splits) == (4, 3, 1, {"train": 4})
    assert raw_rows(sessions) == [("import:hh-rlhf", f"train:{i}", line, "ok") for i, line in enumerate(lines[:3])] + [
        ("import:hh-rlhf", "train:3", "{not json", "quarantined")
    ]
    with sessions.begin() as s:
        assert {r.origin for r in s.scalars(select(RawRecord))} == {str(path.resolve())}


def test_splits_limit_and_a_row_twice(sessions, tmp_path):
    from datasets import Dataset, DatasetDict

    rows = test_shp.ROWS[:2]
    DatasetDict({"train": Dataset.from_list(rows + rows[:1]), "test": Dataset.from_list(rows[1:])}).save_to_disk(
        tmp_path / "shp"
    )
    test = run_import(sessions, tmp_path / "shp", "shp", split="test")
    assert (test.rows, test.rankings, test.splits) == (1, 1, {"test": 1})
    first = run_import(sessions, tmp_path / "shp", "shp", limit=2)
    assert (first.rows, first.rankings, first.duplicates, first.splits) == (2, 1, 1, {"train": 2})
    every = run_import(sessions, tmp_path / "shp", "shp")
    assert (every.rows, every.rankings, every.duplicates, every.splits) == (4, 0, 4, {"train": 3, "test": 1})
    with sessions.begin() as s:
        assert [r.locator for r in s.scalars(select(RawRecord).order_by(RawRecord.id))] == [
            "test:0",
            "train:0",
        ]  # a row seen again (train:1 is test:0, train:2 is train:0) keeps its first raw record


@pytest.mark.parametrize(
    ("rows", "name"),
    [
        (test_trl.ROWS[:5], "trl"),
        (HH, "hh-rlhf"),
        (test_nectar.ROWS[:2], "nectar"),
        (test_shp.ROWS[:2], "shp"),
        (test_pku.ROWS[:2], "pku-saferlhf"),
    ],
)
def test_auto_picks_the_format_from_the_columns(sessions, tmp_path, rows, name):
    summary = run_import(sessions, write_jsonl(tmp_path / "d.jsonl", rows), "auto")
    per_row = 2 if name == "pku-saferlhf" else 1  # its two verdicts: helpfulness and harmlessness
    assert (summary.format, summary.quarantined, summary.rankings) == (name, 0, per_row * len(rows))


def test_auto_needs_columns_some_format_has(sessions, tmp_path):
    with pytest.raises(
        InputError,
        match=r"no format fits the columns of .*d\.jsonl \(a, b\): name one with --format "
        r"\(trl, hh-rlhf, ",
    ):
        run_import(sessions, write_jsonl(tmp_path / "d.jsonl", [{"a": 1, "b": 2}]), "auto")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(InputError, match="holds no rows to pick a format from"):
        run_import(sessions, tmp_path / "empty.jsonl", "auto")
    assert raw_rows(sessions) == []


def test_a_format_none_of_the_first_rows_fit_stops_naming_the_one_that_does(sessions, tmp_path):
    path = write_jsonl(tmp_path / "hh.jsonl", HH)
    with pytest.raises(InputError) as stopped:
        run_import(sessions, path, "trl")
    assert str(stopped.value) == (
        f"none of the first 3 rows of {path} can be read as trl (train:0: 'chosen' and 'rejected' are replies without "
        "a 'prompt' (an implicit prompt needs whole conversations: lists of messages)); they are hh-rlhf rows: "
        "use --format hh-rlhf"
    )
    assert raw_rows(sessions) == []  # nothing was written
    # rows of the named format that are all bad are quarantined: no other format reads them
    bad = write_jsonl(tmp_path / "bad.jsonl", [test_hh.ROWS[3], test_hh.ROWS[4]])
    summary = run_import(sessions, bad, "hh-rlhf")
    assert summary.all_quarantined and summary.quarantined == 2


def test_a_criterion_the_format_does_not_give_stops(sessions, tmp_path):
    hh, pku = write_jsonl(tmp_path / "hh.jsonl", HH), write_jsonl(tmp_path / "pku.jsonl", test_pku.ROWS[:2])
    with pytest.raises(InputError) as stopped:
        run_import(sessions, pku, "pku-saferlhf", criterion="safety")
    assert str(stopped.value) == (
        "--criterion safety: pku-saferlhf gives no such criterion (it gives helpfulness, harmlessness)"
    )
    with pytest.raises(InputError) as stopped:
        run_import(sessions, write_jsonl(tmp_path / "shp.jsonl", test_shp.ROWS[:2]), "auto", criterion="honesty")
    assert str(stopped.value) == (
        "--criterion honesty: shp rows give only overall rankings, so there is no honesty to keep"
    )
    with pytest.raises(InputError, match=r"^--criterion must be a criterion's short name .*, not 'Safety!'$"):
        DatasetImportSettings(criterion="Safety!")
    with pytest.raises(InputError, match=r"^unknown format 'hh'"):
        DatasetImportSettings(format="hh")
    assert raw_rows(sessions) == []  # stopped before anything was written
    # overall is every format's, and hh-rlhf's subsets are its criteria
    assert run_import(sessions, hh, "hh-rlhf", criterion="overall").criteria == {"overall": 3}
    assert run_import(sessions, hh, "hh-rlhf", criterion="harmlessness").criteria == {"harmlessness": 3}


def test_batches_never_split_a_group_of_rows(sessions, tmp_path):
    path = write_parquet(tmp_path / "oasst2.parquet", test_oasst2.ROWS)
    summary = import_dataset(sessions, str(path), DatasetImportSettings(format="oasst2", batch_rows=1))
    assert (summary.rows, summary.rankings, summary.quarantined) == (25, 3, 7)
    assert [r["external_id"] for r in stored(sessions)] == ["t1", "p1", "t2"]


def test_damaged_part_way_keeps_the_batches_before(sessions, tmp_path):
    data = gzip.compress(("".join(write_jsonl(tmp_path / "x.jsonl", [row]).read_text() for row in HH * 100)).encode())
    path = tmp_path / "hh.jsonl.gz"
    path.write_bytes(data[: len(data) * 3 // 4])  # cut short: the last rows cannot be read
    with pytest.raises(InputError, match=r"is damaged after line [\d,]+ .*; the [\d,]+ rows before it are stored$"):
        import_dataset(sessions, str(path), DatasetImportSettings(format="hh-rlhf", batch_rows=7))
    assert len(stored(sessions)) == 3 and len(raw_rows(sessions)) == 3
    assert quarantined(sessions) == {}


def test_a_quarantined_row_met_again_is_a_duplicate(cli, sessions, tmp_path):
    bad, good = test_hh.ROWS[3], test_hh.ROWS[0]
    path = write_jsonl(tmp_path / "hh.jsonl", [bad, good, bad, bad])
    summary = import_dataset(sessions, str(path), DatasetImportSettings(format="hh-rlhf", batch_rows=2))
    assert (summary.rows, summary.rankings, summary.quarantined, summary.duplicates) == (4, 1, 1, 2)
    assert sum(summary.reasons.values()) == summary.quarantined
    listed = cli("quarantine", "list").stdout.splitlines()
    assert len(listed) == summary.quarantined == 1  # the summary counts what `quarantine list` shows
    again = run_import(sessions, path, "hh-rlhf")
    assert (again.rankings, again.quarantined, again.duplicates) == (0, 1, 3)
