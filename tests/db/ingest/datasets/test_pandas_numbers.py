"""Numbers as pandas writes them: an integer column with a missing value is floats (-3.0, 1.0, and NaN).

HelpSteer3's `overall_preference`, PKU-SafeRLHF's response ids, SHP's `labels` and the arena 55k shape's
winner flags and id are read as the integers they are; 1.5 is refused in one sentence naming the field,
and so is a boolean.
"""

import re
from pathlib import Path

import pytest

from preflab.db.ingest.datasets import arena, helpsteer, pku, shp
from preflab.errors import Invalid
from tests.db.ingest.datasets import test_arena, test_helpsteer3, test_pku, test_shp
from tests.db.ingest.datasets.shapes_b import quarantined, run_import, stored, write_jsonl


def pandas_file(path: Path, rows: list[dict]) -> Path:
    """The rows as pandas writes them: parquet, or JSON Lines (`to_json(orient="records", lines=True)`)."""
    import pandas as pd

    frame = pd.DataFrame(rows)
    if path.suffix == ".parquet":
        frame.to_parquet(path)
    else:
        frame.to_json(path, orient="records", lines=True, force_ascii=False)
    return path


def missing(row: dict, key: str) -> dict:
    return {**row, key: None}


# format, rows with one missing value (the last), the field (PKU-SafeRLHF's by the criterion its verdict is:
# its other verdict ranks the row without it)
CRITERION = {"pku-saferlhf": "helpfulness"}
CASES = {
    "helpsteer3": (
        [*test_helpsteer3.ROWS[:3], missing(test_helpsteer3.ROWS[4], "overall_preference")],
        "overall_preference",
    ),
    "pku-saferlhf": ([*test_pku.ROWS[:2], missing(test_pku.ROWS[0], "better_response_id")], "better_response_id"),
    "shp": ([*test_shp.ROWS[:2], missing(test_shp.ROWS[0], "labels")], "labels"),
    "arena": (
        [*test_arena.KAGGLE[:3], {**missing(test_arena.KAGGLE[0], "winner_model_a"), "id": None}],
        "winner_model_a",
    ),
}


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
@pytest.mark.parametrize("name", list(CASES))
def test_whole_number_floats_read_as_the_integers_they_are(sessions, tmp_path, name, suffix):
    rows, key = CASES[name]
    criterion = CRITERION.get(name)
    plain = run_import(sessions, write_jsonl(tmp_path / "plain.jsonl", rows[:-1]), name, criterion=criterion)
    expected = stored(sessions)
    path = pandas_file(tmp_path / f"pandas{suffix}", rows)
    assert re.search(r"\d\.0\b", pandas_text(path, key))  # pandas wrote the column as floats
    summary = run_import(sessions, path, name, criterion=criterion)
    assert list(quarantined(sessions).values()) == [f"missing '{key}'"]
    # the same rankings as from the integers: tiers, details and ids alike, so recognised as the rankings
    # stored (by their own id, shp's and arena's; by what they mean, the others': issue 46 §1a)
    assert (summary.rankings, summary.duplicates, summary.quarantined) == (0, plain.rankings, 1)
    assert stored(sessions) == expected


def pandas_text(path: Path, key: str) -> str:
    """The column as the file holds it, as text (parquet: its Arrow type)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return str(pq.read_table(path).column(key).to_pylist())
    return path.read_text()


@pytest.mark.parametrize(
    ("fmt", "row", "key", "allowed"),
    [
        (helpsteer.FORMAT, test_helpsteer3.ROWS[0], "overall_preference", "-3, -2, -1, 0, 1, 2, 3"),
        (pku.FORMAT, test_pku.ROWS[0], "better_response_id", "0, 1"),
        (shp.FORMAT, test_shp.ROWS[0], "labels", "1, 0"),
        (arena.FORMAT, test_arena.KAGGLE[0], "winner_model_a", "0, 1"),
    ],
)
def test_a_fraction_or_a_boolean_is_refused_naming_the_field(fmt, row, key, allowed):
    options = {"criterion": CRITERION[fmt.name]} if fmt.name in CRITERION else {}
    with pytest.raises(Invalid) as caught:
        fmt.parse({**row, key: 1.5}, **options)
    assert str(caught.value) == f"'{key}' is 1.5, not a whole number (one of {allowed})"
    with pytest.raises(Invalid) as caught:
        fmt.parse({**row, key: True}, **options)
    assert str(caught.value) == f"'{key}' is True, not one of {allowed}"
    assert fmt.parse({**row, key: float(row[key])}) == fmt.parse(row)
