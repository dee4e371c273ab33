"""Where `import dataset` reads rows from: files, save_to_disk folders, folders of data files, the Hub (offline)."""

import gzip
import json

import pytest

from preflab.db.ingest.datasets.hub import hub_source
from preflab.db.ingest.datasets.sources import open_source
from preflab.errors import InputError
from tests.db.ingest.datasets.shapes_b import write_csv, write_jsonl, write_parquet

ROWS = [{"prompt": f"p{i}", "chosen": f"c{i}", "rejected": f"r{i}"} for i in range(5)]


def read(source, split=None):
    opened = open_source(str(source), split)
    return [(row.locator, row.data) for row in opened.rows]


def test_jsonl_rows_are_the_lines_as_received(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"a":  2}\r\nnot json\n[1]\n{"a": "\\u0000"}\n')
    rows = list(open_source(str(path)).rows)
    assert [(r.locator, r.payload, r.data, r.error) for r in rows] == [
        ("train:0", '{"a": 1}', {"a": 1}, None),
        ("train:1", '{"a":  2}', {"a": 2}, None),
        ("train:2", "not json", None, "not valid JSON (invalid literal, expected 'null')"),
        ("train:3", "[1]", None, "expected a JSON object, got list"),
        ("train:4", '{"a": "\\u0000"}', None, "'a' holds a NUL character (\\u0000), which the database cannot store"),
    ]
    gz = tmp_path / "d.jsonl.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert [r.digest for r in open_source(str(gz)).rows] == [r.digest for r in rows]


def test_json_array_is_read_an_item_at_a_time(tmp_path, monkeypatch):
    import preflab.db.ingest.datasets.sources as sources

    monkeypatch.setattr(sources, "_CHUNK", 7)  # items and numbers cut across reads
    path = tmp_path / "d.json"
    path.write_text(
        '\ufeff [ {"a": 12345678},\n {"b": [1, 2, {"c": "x, ]"}]} , 3, {"d": "\\ud800"} ]\n', encoding="utf-8"
    )
    rows = list(open_source(str(path)).rows)
    assert [(r.payload, r.data, r.error) for r in rows] == [
        ('{"a": 12345678}', {"a": 12345678}, None),
        ('{"b": [1, 2, {"c": "x, ]"}]}', {"b": [1, 2, {"c": "x, ]"}]}, None),
        ("3", None, "expected a JSON object, got int"),
        (
            '{"d": "\\ud800"}',
            None,
            "'d' holds a lone UTF-16 surrogate (\\ud800), which is not text the database can store",
        ),
    ]
    (tmp_path / "empty.json").write_text("[]")
    assert read(tmp_path / "empty.json") == []
    cut = tmp_path / "cut.json"
    cut.write_text('[{"a": 1}, {"a": 2}, {"a": ')
    opened = open_source(str(cut))
    assert next(opened.rows).data == {"a": 1} and next(opened.rows).data == {"a": 2}
    with pytest.raises(InputError, match=r"cut.json is not a valid JSON array after 2 rows \(Expecting value\)"):
        next(opened.rows)


def test_json_lines_in_a_json_file(tmp_path):
    path = write_jsonl(tmp_path / "train.json", ROWS[:2])  # SHP and hh-rlhf name JSON Lines files .json
    assert read(path) == [("train:0", ROWS[0]), ("train:1", ROWS[1])]


def test_parquet_rows_and_their_count(tmp_path):
    path = write_parquet(tmp_path / "train-00000-of-00001.parquet", ROWS)
    opened = open_source(str(path))
    assert opened.total == 5
    assert [(r.locator, r.data, json.loads(r.payload)) for r in opened.rows] == [
        (f"train:{i}", row, row) for i, row in enumerate(ROWS)
    ]
    with pytest.raises(InputError, match="has no split 'test' \\(it has train\\)"):
        open_source(str(path), "test")
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    with pytest.raises(InputError, match=r"bad\.parquet cannot be read as Parquet"):
        open_source(str(bad))


def test_csv_files_and_folders_of_them(tmp_path):
    rows = [
        {"id": 7, "text": "NA", "score": 1.5, "note": "null"},
        {"id": 8, "text": 'a, "quoted"\nline', "score": 2, "note": ""},
    ]
    path = write_csv(tmp_path / "train.csv", rows)
    # numbers come as numbers, an empty cell as None, the text "NA" or "null" as itself
    expected = [("train:0", rows[0]), ("train:1", {**rows[1], "score": 2.0, "note": None})]
    assert read(path) == expected
    opened = open_source(str(path))
    assert opened.origin == str(path.resolve()) and json.loads(next(opened.rows).payload) == rows[0]
    gz = tmp_path / "gz" / "train.csv.gz"
    gz.parent.mkdir()
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert read(gz) == expected
    folder = tmp_path / "folder"
    folder.mkdir()
    write_csv(folder / "train.csv", rows[:1])
    write_csv(folder / "test.csv", rows[1:])
    assert read(folder) == [expected[0], ("test:0", expected[1][1])]
    with pytest.raises(InputError, match="has no split 'test' \\(it has train\\)"):
        open_source(str(path), "test")


def test_save_to_disk_folders(tmp_path):
    from datasets import Dataset, DatasetDict

    DatasetDict({"train": Dataset.from_list(ROWS[:3]), "test": Dataset.from_list(ROWS[3:])}).save_to_disk(
        tmp_path / "dict"
    )
    assert read(tmp_path / "dict") == [
        ("train:0", ROWS[0]),
        ("train:1", ROWS[1]),
        ("train:2", ROWS[2]),
        ("test:0", ROWS[3]),
        ("test:1", ROWS[4]),
    ]
    assert read(tmp_path / "dict", "test") == [("test:0", ROWS[3]), ("test:1", ROWS[4])]
    with pytest.raises(InputError, match=r"has no split 'valid' \(it has train, test\)"):
        open_source(str(tmp_path / "dict"), "valid")
    Dataset.from_list(ROWS[:2]).save_to_disk(tmp_path / "one")
    assert read(tmp_path / "one") == [("train:0", ROWS[0]), ("train:1", ROWS[1])]


def test_a_folder_of_data_files_goes_through_load_dataset(tmp_path):
    data = tmp_path / "repo" / "data"
    data.mkdir(parents=True)
    write_parquet(data / "train-00000-of-00001.parquet", ROWS[:3])
    write_parquet(data / "test-00000-of-00001.parquet", ROWS[3:])
    assert read(tmp_path / "repo") == [
        ("train:0", ROWS[0]),
        ("train:1", ROWS[1]),
        ("train:2", ROWS[2]),
        ("test:0", ROWS[3]),
        ("test:1", ROWS[4]),
    ]
    assert read(tmp_path / "repo", "test") == [("test:0", ROWS[3]), ("test:1", ROWS[4])]
    with pytest.raises(InputError, match="has no split 'dev'"):
        read(tmp_path / "repo", "dev")
    (tmp_path / "nothing").mkdir()
    with pytest.raises(InputError, match="holds no data files"):
        open_source(str(tmp_path / "nothing"))


def test_hub_ids_load_through_datasets_offline(tmp_path, monkeypatch):
    # The Hub cannot be reached here: load_dataset is called with a local dataset folder, as it is with an id.
    repo = tmp_path / "hh"
    repo.mkdir()
    write_jsonl(repo / "train.jsonl", ROWS[:2])
    opened = hub_source(str(repo), None, origin=None)
    assert opened.origin == f"hub:{repo}"
    assert [(r.locator, r.data) for r in opened.rows] == [("train:0", ROWS[0]), ("train:1", ROWS[1])]
    assert opened.total == 2  # offline (the tests set HF_HUB_OFFLINE=1): read from the local copy, not streamed
    with pytest.raises(
        InputError,
        match=r"^no-such-owner/no-such-dataset cannot be loaded by datasets \(HF_HUB_OFFLINE"
        r" is set: only a dataset in the local cache can be loaded\): ",
    ):
        open_source("no-such-owner/no-such-dataset")
    with pytest.raises(InputError, match=r"^\./missing\.jsonl is not a file or folder$"):
        open_source("./missing.jsonl")


def test_an_unreachable_hub_fails_at_once_saying_what_to_do(monkeypatch):
    import socket
    import threading

    from huggingface_hub import constants

    # The Hub at a local port that hangs up on every connection: as unreachable as with no network, without
    # reaching for it. "At once" is counted, not timed: one connection, no retries (huggingface_hub's own took 25 s).
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    connections = []

    def hang_up() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # closed: the test is over
                return
            connections.append(conn)
            conn.close()

    threading.Thread(target=hang_up, daemon=True).start()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(InputError) as stopped:
        open_source("Anthropic/hh-rlhf")
    listener.close()
    assert len(connections) == 1
    assert str(stopped.value).startswith(
        f"Anthropic/hh-rlhf cannot be loaded: the Hugging Face Hub (http://127.0.0.1:{port}) cannot be reached ("
    )
    assert str(stopped.value).endswith("); set HF_HUB_OFFLINE=1 to read it from the local cache, or give a local path")
