"""`ls import` never records a preference backwards, and takes hostile export files as `import` does;
`ls sync` takes what Label Studio sends back the same way.

The export is the shape Label Studio's own gallery template "LLM Ranker" produces:
two buckets, written in alphabetical order (so "biased" before "relevant").
"""

import copy
import gzip
import json

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from preflab.cli import cli as root
from preflab.db.models import Candidate
from preflab.errors import EXIT_ALL_QUARANTINED
from preflab.templates import label_config
from tests.db.procs import TABLES, counts, dangling, rows, scalar
from tests.labelling.ls_helpers import ranker_result, session, unique
from tests.properties import examples

# The labelling config of Label Studio's gallery template "LLM Ranker" (generative-ai/llm-ranker), its
# elements verbatim, the styling left out.
GALLERY_LLM_RANKER = """<View>
  <View style="display: flex; align-items: center; font-size: 1em;">
    <View style="margin: var(--spacing-tight) var(--spacing-tight) 0 0;">
      <Header value="Task: " style="font-size: 1em;"/>
    </View>
    <Text name="task" value="$task"/>
  </View>
  <View>
    <Header value="Prompt: "  />
    <Text name="prompt" value="$prompt"/>
  </View>
  <View>
    <List name="answers" value="$items" title="All Results" />
    <Ranker name="rank" toName="answers">
      <Bucket name="relevant_results" title="Relevant Results" />
      <Bucket name="biased_results" title="Biased Results" />
    </Ranker>
  </View>
</View>
<!-- { "data": { "task": "Drag and rank the given AI model responses" } } -->
"""

ITEMS = [
    {
        "title": "LlamaModel",
        "id": "llama_model",
        "body": "While the initial impact of AI may seem daunting, technological evolution has historically "
        "led to more job creation in the long run.",
    },
    {
        "title": "CobraAI",
        "id": "cobra_ai",
        "body": "Artificial Intelligence will replace all human jobs, leading to massive unemployment.",
    },
    {
        "title": "PumaIntelligence",
        "id": "puma_intelligence",
        "body": "Artificial intelligence will definitely create more jobs than it will eliminate.",
    },
]
RELEVANT, BIASED = ["llama_model", "puma_intelligence"], ["cobra_ai"]


def gallery_task(
    task_id=1, annotation_id=101, prompt="Discuss the implications of AI on the job market.", user=1
) -> dict:
    value = {"ranker": {"_": [], "biased_results": BIASED, "relevant_results": RELEVANT}}  # as exported
    return {
        "id": task_id,
        "project": 7,
        "data": {"task": "Rank by relevance and bias.", "prompt": prompt, "items": ITEMS},
        "annotations": [
            {
                "id": annotation_id,
                "completed_by": user,
                "was_cancelled": False,
                "result": [
                    {"from_name": "rank", "to_name": "answers", "type": "ranker", "origin": "manual", "value": value}
                ],
            }
        ],
    }


def write_export(path, tasks, encode=lambda text: text.encode()):
    path.write_bytes(encode(json.dumps(tasks, indent=2)))
    return path


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

BUCKETS = ("--buckets", "relevant_results,biased_results", "--json")


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


# --- property: `ls import` on anything ------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["\x00", "\ud800", "relevant_results", "_", "llama_model"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def export_tasks(draw):
    """A valid gallery task, one with a field replaced by any JSON value, or any JSON value at all."""
    task = gallery_task(
        draw(st.integers(1, 6)),
        draw(st.integers(1, 12)),
        draw(st.sampled_from(["p1", "p2"])),
        user=draw(st.integers(1, 3)),
    )
    value = task["annotations"][0]["result"][0]["value"]["ranker"]
    value["relevant_results"], value["biased_results"] = draw(
        st.sampled_from([(RELEVANT, BIASED), (BIASED, RELEVANT), (RELEVANT + BIASED, [])])
    )
    kind = draw(st.sampled_from(["valid", "task field", "annotation field", "anything"]))
    if kind == "task field":
        task[draw(st.sampled_from(["id", "data", "annotations", "project"]))] = draw(json_values)
    elif kind == "annotation field":
        task["annotations"][0][draw(st.sampled_from(["id", "completed_by", "result", "was_cancelled"]))] = draw(
            json_values
        )
    elif kind == "anything":
        return draw(json_values)
    return task


def flawed(where: str, value) -> dict:
    """A gallery task with one field (a path of keys and indexes into the task) set to `value`."""
    task = copy.deepcopy(gallery_task())  # its items are shared by every gallery task
    *path, last = [int(step) if step.isdigit() else step for step in where.split(".")]
    node = task
    for step in path:
        node = node[step]
    node[last] = value
    return task


def run_ls_import(db_url, path, flags):
    """`ls import … --json`: its summary, or its one error line; never a traceback."""
    result = CliRunner().invoke(root, ["--database-url", db_url, "ls", "import", str(path), *flags, "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert result.exit_code in (0, 1, EXIT_ALL_QUARANTINED) and "Traceback" not in result.output
    if result.exit_code == 1:
        assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1
        return result.stderr
    summary = json.loads(result.stdout)
    usable = summary["new"] + summary["updated"] + summary["unchanged"]
    unusable = summary["quarantined"] + summary["still_quarantined"]
    assert (result.exit_code == EXIT_ALL_QUARANTINED) == (unusable > 0 and usable == 0), summary
    return summary


@settings(
    max_examples=examples(30),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    tasks_=st.lists(export_tasks(), max_size=6),
    ascii_only=st.booleans(),
    damage=st.none() | st.binary(max_size=4),
    at=st.floats(0, 1),
    compressed=st.booleans(),
    order_known=st.booleans(),
)
# Text the database cannot store, anywhere in a task (found by Hypothesis: a task id "\x00" failed
# the COPY into Postgres), as \u escapes and as raw UTF-8.
@example(tasks_=[flawed("id", "\x00")], ascii_only=True, damage=None, at=0, compressed=False, order_known=True)
@example(tasks_=[flawed("id", "\ud800")], ascii_only=True, damage=None, at=0, compressed=False, order_known=True)
@example(
    tasks_=[flawed("annotations.0.id", "\x00")], ascii_only=False, damage=None, at=0, compressed=False, order_known=True
)
@example(
    tasks_=[flawed("annotations.0.completed_by", {"id": 1, "email": "\x00"})],
    ascii_only=True,
    damage=None,
    at=0,
    compressed=False,
    order_known=True,
)
@example(
    tasks_=[flawed("annotations.0.result.0.type", "\x00")],
    ascii_only=True,
    damage=None,
    at=0,
    compressed=False,
    order_known=True,
)
@example(
    tasks_=[flawed("annotations.0.result.0.id", "\ud800"), gallery_task(2, 12, "p2")],
    ascii_only=True,
    damage=None,
    at=0,
    compressed=True,
    order_known=True,
)
@example(
    tasks_=[flawed("data.items.0.id", "\x00")], ascii_only=False, damage=None, at=0, compressed=False, order_known=True
)
@example(
    tasks_=[flawed("annotations.0.result.0.value.ranker", {"\x00": [], "\ud800": ["cobra_ai"]})],
    ascii_only=True,
    damage=None,
    at=0,
    compressed=False,
    order_known=False,
)
@example(
    tasks_=[flawed("meta", {"note": "\x00\ud800"})],
    ascii_only=False,
    damage=None,
    at=0,
    compressed=False,
    order_known=True,
)
def test_ls_import_on_anything_exits_cleanly_and_is_idempotent(
    db_url, tmp_path, tasks_, ascii_only, damage, at, compressed, order_known
):
    data = json.dumps(tasks_, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    if damage is not None:
        cut = int(len(data) * at)
        data = data[:cut] + damage + data[cut:]
    path = tmp_path / ("export.json.gz" if compressed else "export.json")
    path.write_bytes(gzip.compress(data) if compressed else data)
    flags = ["--buckets", "relevant_results,biased_results"] if order_known else []

    first = run_ls_import(db_url, path, flags)
    before = counts(db_url, TABLES)
    second = run_ls_import(db_url, path, flags)
    assert counts(db_url, TABLES) == before  # importing again changes nothing
    assert dangling(db_url) == {}
    if isinstance(first, dict):
        assert isinstance(second, dict) and (second["new"], second["updated"], second["quarantined"]) == (0, 0, 0)
        # What was quarantined is said again, as still quarantined.
        assert second["still_quarantined"] == first["quarantined"] + first["still_quarantined"]
    else:
        assert second == first


# --- text the database cannot store, named where it is -------------------------------------------

SURROGATE = "holds a lone UTF-16 surrogate (\\ud800), which is not text the database can store"
NUL = "holds a NUL character (\\u0000), which the database cannot store"
FLAWS = {  # where (as `flawed` takes it) -> value, and the quarantine reason
    "id": ("\x00", f"task 'id' {NUL}"),
    "data.prompt": ("\ud800?", f"task 'data'['prompt'] {SURROGATE}"),
    "data.items.1.body": ("x\x00", f"task 'data'['items'][1]['body'] {NUL}"),
    "data.items.2.id": ("\ud800", f"task 'data'['items'][2]['id'] {SURROGATE}"),
    "meta": ({"k\x00": 1}, f"the key task 'meta'['k\\x00'] {NUL}"),
    "annotations.0.id": ("\x00", f"annotation 'id' {NUL}"),
    "annotations.0.completed_by": (
        {"id": 3, "email": "ann\ud800@example.com"},
        f"annotation 'completed_by'['email'] {SURROGATE}",
    ),
    "annotations.0.result.0.id": ("\x00", f"annotation 'result'[0]['id'] {NUL}"),
    "annotations.0.result.0.type": ("ranker\x00", f"annotation 'result'[0]['type'] {NUL}"),
}


def test_text_the_database_cannot_store_is_quarantined_where_it_is(cli, db_url, tmp_path):
    tasks = [gallery_task(1, 100, "a good task")]
    for n, (where, (value, _)) in enumerate(FLAWS.items()):
        task = flawed(where, value)
        if where != "id":
            task["id"] = 2 + n
        if where != "annotations.0.id":
            task["annotations"][0]["id"] = 200 + n
        tasks.append(task)
    export = write_export(tmp_path / "export.json", tasks, lambda text: text.encode())
    summary = json.loads(cli("ls", "import", export, *BUCKETS).stdout)
    assert (summary["new"], summary["quarantined"]) == (1, len(FLAWS))
    assert summary["reasons"] == {reason: 1 for _, reason in FLAWS.values()}
    # Each is kept as received, the text as the escape it came as: the annotation with its task's data,
    # and (for a field outside them, like `meta`) the whole task.
    kept = [
        cli("quarantine", "show", row["id"]).stdout for row in json.loads(cli("quarantine", "list", "--json").stdout)
    ]
    assert sum("\\u0000" in k or "\\ud800" in k for k in kept) == len(FLAWS) - 1
    held = [text for (text,) in rows(db_url, "SELECT payload FROM raw_records WHERE source = 'label-studio:task-held'")]
    assert sum('"k\\u0000"' in text for text in held) == 1
    again = cli("ls", "import", export, *BUCKETS)
    assert json.loads(again.stdout)["still_quarantined"] == len(FLAWS)

    # A file of nothing but such tasks is a wrong file: exit 3, its summary printed all the same.
    bad = [flawed("id", "\x00"), flawed("data.prompt", "\ud800")]
    for n, task in enumerate(bad):
        task["annotations"][0]["id"] = 900 + n
    only_bad = write_export(tmp_path / "bad.json", bad, lambda text: text.encode())
    result = cli("ls", "import", only_bad, "--buckets", "relevant_results,biased_results", expect_ok=False)
    assert result.exit_code == EXIT_ALL_QUARANTINED
    assert result.stdout.startswith(
        "imported bad.json: 2 tasks, 2 annotations: 0 new, 0 updated, 0 unchanged, 2 quarantined, 0 deleted"
    )


def test_sync_quarantines_a_nul_from_label_studio_where_it_is(cli, db_url, ls_env):
    """Label Studio keeps a NUL in task data and in results, and sends it back: `ls sync` on it."""
    sdk = ls_env.sdk()
    project = sdk.projects.create(title=unique("nul"), label_config=label_config("ranking"))
    items = [{"id": "a", "title": "A", "body": unique("alpha")}, {"id": "b", "title": "B", "body": unique("beta")}]
    data = [
        {"prompt": unique("p\x00q"), "items": items},
        {"prompt": unique("ids"), "items": [dict(items[0], id="\x00"), items[1]]},
        {"prompt": unique("result id"), "items": items},
        {"prompt": unique("fine"), "items": items},
    ]
    shown = {"system": "", "dialogue": [{"role": "user", "content": "(the prompt)"}]}  # what the template shows
    task_ids = sdk.projects.import_tasks(
        project.id, request=[{"data": d | shown} for d in data], return_task_ids=True
    ).task_ids
    for tid, d in zip(task_ids, data):
        rank = [d["items"][1]["id"], d["items"][0]["id"]]
        result = ranker_result({"rank": rank})
        if d["prompt"].startswith("result id"):
            result[0]["id"] = "r\x00"
        sdk.annotations.create(tid, result=result)
    first = json.loads(cli("ls", "sync", "--project", project.id, "--json").stdout)
    assert (first["new"], first["quarantined"]) == (1, 3)
    assert first["reasons"] == {
        f"task 'data'['prompt'] {NUL}": 1,
        f"task 'data'['items'][0]['id'] {NUL}": 1,
        f"annotation 'result'[0]['id'] {NUL}": 1,
    }
    again = json.loads(cli("ls", "sync", "--project", project.id, "--json").stdout)
    assert (again["new"], again["unchanged"], again["quarantined"], again["still_quarantined"]) == (0, 1, 0, 3)
