"""`ls import` on anything exits cleanly and is idempotent; text the database cannot store is quarantined where
it is, from an export file and from what `ls sync` gets back from Label Studio."""

import gzip
import json

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from preflab.cli import cli as root
from preflab.errors import EXIT_ALL_QUARANTINED
from preflab.templates import label_config
from tests.db.procs import TABLES, counts, dangling, rows
from tests.labelling.ls_helpers import ranker_result, unique
from tests.labelling.studio.gallery_export import BIASED, BUCKETS, RELEVANT, flawed, gallery_task, write_export
from tests.properties import examples

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

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
