"""`ls import` never records a preference backwards, and takes hostile export files as `import` does
(test_ls_hostile_text.py: files of anything, and text the database cannot store).

The export is the shape Label Studio's own gallery template "LLM Ranker" produces:
two buckets, written in alphabetical order (so "biased" before "relevant").
"""

import gzip
import json

import pytest
from sqlalchemy import select

from preflab.db.models import Candidate
from tests.db.procs import TABLES, counts, rows, scalar
from tests.labelling.ls_helpers import session
from tests.labelling.studio.gallery_export import (
    BIASED,
    BUCKETS,
    GALLERY_LLM_RANKER,
    ITEMS,
    RELEVANT,
    gallery_task,
    write_export,
)


def chosen_and_rejected(url):
    """(chosen body, rejected body) of every comparison."""
    with session(url) as s:
        body = dict(s.execute(select(Candidate.id, Candidate.text)).all())
    return {(body[c], body[r]) for c, r in rows(url, "SELECT chosen_id, rejected_id FROM comparisons")}


def expected_direction():
    text = {i["id"]: i["body"] for i in ITEMS}
    return {(text[good], text[bad]) for good in RELEVANT for bad in BIASED}


def test_an_export_with_buckets_and_no_known_order_stops_before_writing_anything(cli, db_url, tmp_path):
    export = write_export(tmp_path / "export.json", [gallery_task()])
    result = cli("ls", "import", export, expect_ok=False)
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "Traceback" not in result.output
    assert result.output == (
        f"Error: {export} ranks with buckets (biased_results, relevant_results), and only "
        "the project's labelling config says which is the best tier: pass --buckets with "
        "them best first, or --label-config with the project's XML\n"
    )
    assert sum(counts(db_url, TABLES).values()) == 0
    assert scalar(db_url, "SELECT count(*) FROM ls_projects") == 0


@pytest.mark.parametrize("how", ["label-config", "buckets"])
def test_with_the_order_given_relevant_is_preferred_to_biased(cli, db_url, tmp_path, how):
    export = write_export(tmp_path / "export.json", [gallery_task()])
    config = tmp_path / "llm-ranker.xml"
    config.write_text(GALLERY_LLM_RANKER, encoding="utf-8")
    flag = ["--label-config", config] if how == "label-config" else ["--buckets", "relevant_results,biased_results"]
    summary = json.loads(cli("ls", "import", export, *flag, "--json").stdout)
    assert (summary["new"], summary["quarantined"]) == (1, 0)
    cli("pairs", "build")
    assert chosen_and_rejected(db_url) == expected_direction()


def test_a_project_preflab_knows_the_config_of_needs_no_flag(cli, db_url, tmp_path):
    config = tmp_path / "llm-ranker.xml"
    config.write_text(GALLERY_LLM_RANKER, encoding="utf-8")
    first = write_export(tmp_path / "first.json", [gallery_task()])
    cli("ls", "import", first, "--label-config", config)  # records project 7 with its config
    later = write_export(tmp_path / "later.json", [gallery_task(2, 102, "Will AI change how we work?")])
    summary = json.loads(cli("ls", "import", later, "--json").stdout)
    assert (summary["new"], summary["quarantined"]) == (1, 0)
    cli("pairs", "build")
    assert len(chosen_and_rejected(db_url)) == 2 and chosen_and_rejected(db_url) == expected_direction()


# --- the byte-level rules of `import`, for export files -------------------------------------


def test_bom_crlf_and_gzip_exports_read_as_plain_ones(cli, tmp_path):
    tasks = [gallery_task(1, 101), gallery_task(2, 102, "Another prompt")]
    windows = write_export(
        tmp_path / "bom.json", tasks, lambda text: b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode()
    )
    zipped = write_export(tmp_path / "export.json.gz", tasks, lambda text: gzip.compress(text.encode()))
    assert json.loads(cli("ls", "import", windows, *BUCKETS).stdout)["new"] == 2
    again = json.loads(cli("ls", "import", zipped, *BUCKETS).stdout)
    assert (again["new"], again["unchanged"], again["quarantined"]) == (0, 2, 0)


@pytest.mark.parametrize(
    "broken, reason, whole_task",
    [
        (
            lambda t: t.replace('"Another prompt"', '"Caf\xe9 prompt"').encode("latin-1"),
            "not valid UTF-8 (byte 0xe9 at offset ",
            True,
        ),
        (
            lambda t: t.replace('"completed_by": 2', '"completed_by": NaN').encode(),
            "holds NaN, which JSON does not allow",
            True,
        ),
        (
            lambda t: t.replace('"Another prompt"', '"Another \\u0000 prompt"').encode(),
            "task 'data'['prompt'] holds a NUL character (\\u0000), which the database cannot store",
            False,
        ),
        (
            lambda t: t.replace('"id": 202', '"id": 99999999999999').encode(),
            "annotation id '99999999999999' is not a Label Studio id",
            False,
        ),
    ],
)
def test_a_task_the_database_cannot_take_is_quarantined_and_the_rest_imports(cli, tmp_path, broken, reason, whole_task):
    tasks = [gallery_task(1, 101), gallery_task(2, 202, "Another prompt", user=2), gallery_task(3, 303, "Third")]
    export = tmp_path / "export.json"
    export.write_bytes(broken(json.dumps(tasks, indent=1, ensure_ascii=False)))
    summary = json.loads(cli("ls", "import", export, *BUCKETS).stdout)
    assert (summary["new"], summary["quarantined"]) == (2, 1)
    (row,) = json.loads(cli("quarantine", "list", "--json").stdout)
    assert row["reason"].startswith(reason)
    shown = cli("quarantine", "show", row["id"]).stdout_bytes[:-1]
    if whole_task:  # a task that could not be read is kept byte for byte, as it was in the file
        assert shown in export.read_bytes() and shown.startswith(b"{") and b'"id": 2,' in shown
    else:  # an annotation is kept with its task's data (see parse.payload)
        assert json.loads(shown)["task"]["id"] == 2
    again = json.loads(cli("ls", "import", export, *BUCKETS).stdout)
    assert (again["new"], again["quarantined"], again["still_quarantined"]) == (0, 0, 1)


def test_a_task_whose_bytes_are_not_utf8_comes_back_exactly(cli, tmp_path):
    tasks = [gallery_task(1, 101), gallery_task(2, 202, "PLACEHOLDER")]
    text = json.dumps(tasks, indent=1)
    export = tmp_path / "export.json"
    export.write_bytes(text.replace("PLACEHOLDER", "caf\udce9").encode("utf-8", "surrogateescape"))
    json.loads(cli("ls", "import", export, *BUCKETS).stdout)
    (row,) = json.loads(cli("quarantine", "list", "--json").stdout)
    shown = cli("quarantine", "show", row["id"]).stdout_bytes[:-1]
    assert b"caf\xe9" in shown and shown in export.read_bytes()  # the task's bytes, exactly as written


def tasks_then(n: int, broken: bytes) -> bytes:
    """An export of `n` tasks (ranked without buckets), one a line, then a task whose bytes break the JSON."""
    tasks = [gallery_task(i + 1, 100 + i, f"prompt {i}") for i in range(n)]
    for task in tasks:
        task["annotations"][0]["result"][0]["value"]["ranker"] = {"rank": RELEVANT + BIASED}
    lines = [json.dumps(task).encode() for task in tasks]
    return b"[" + b",\n".join([*lines, broken]) + b"]"


@pytest.mark.parametrize(
    "content, message, stored",
    [
        (
            b"[" + b"[" * 100_000 + b"]" * 100_000 + b"]",
            "has task 1, at line 1, column 2, nested too deeply to be read; no tasks were stored",
            0,
        ),
        (
            tasks_then(1, b'{"id": 9, "data": "\x00"}'),
            "is not valid JSON at line 2, column 20 (a raw NUL byte); the task before it was stored",
            1,
        ),
        (
            tasks_then(0, b'{"id": 9, "data": "\x00"}'),
            "is not valid JSON at line 1, column 21 (a raw NUL byte); no tasks were stored",
            0,
        ),
        (
            tasks_then(2, b'{"id": 9, "data": "\x07"}'),
            "is not valid JSON at line 3, column 20 (a raw control character, 0x07); the 2 tasks before it were stored",
            2,
        ),
        (
            "[{}]".encode("utf-16"),
            "is UTF-16 text: preflab reads UTF-8 JSON Lines, plain or gzip/bzip2/xz-compressed",
            0,
        ),
    ],
)
@pytest.mark.parametrize("order_known", [True, False], ids=["buckets", "no-buckets"])
def test_an_export_that_cannot_be_read_on_is_one_sentence(cli, db_url, tmp_path, content, message, stored, order_known):
    export = tmp_path / "export.json"
    export.write_bytes(content)
    result = cli("ls", "import", export, *(BUCKETS if order_known else ()), expect_ok=False)
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "Traceback" not in result.output
    assert result.output == f"Error: {export} {message}\n"
    assert scalar(db_url, "SELECT count(*) FROM rankings") == stored  # what the sentence says was stored
