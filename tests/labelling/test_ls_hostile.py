"""`ls import` never records a preference backwards, and takes hostile export files as `import` does.

The export is the shape Label Studio's own gallery template "LLM Ranker" produces:
two buckets, written in alphabetical order (so "biased" before "relevant").
"""

import gzip
import json

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from preflab.cli import cli as root

from preflab.db.models import Candidate
from tests.db.procs import TABLES, counts, dangling, rows, scalar
from tests.labelling.ls_helpers import session

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

ITEMS = [{"title": "LlamaModel", "id": "llama_model",
          "body": "While the initial impact of AI may seem daunting, technological evolution has historically "
                  "led to more job creation in the long run."},
         {"title": "CobraAI", "id": "cobra_ai",
          "body": "Artificial Intelligence will replace all human jobs, leading to massive unemployment."},
         {"title": "PumaIntelligence", "id": "puma_intelligence",
          "body": "Artificial intelligence will definitely create more jobs than it will eliminate."}]
RELEVANT, BIASED = ["llama_model", "puma_intelligence"], ["cobra_ai"]


def gallery_task(task_id=1, annotation_id=101, prompt="Discuss the implications of AI on the job market.",
                 user=1) -> dict:
    value = {"ranker": {"_": [], "biased_results": BIASED, "relevant_results": RELEVANT}}  # as exported
    return {"id": task_id, "project": 7, "data": {"task": "Rank by relevance and bias.", "prompt": prompt,
                                                   "items": ITEMS},
            "annotations": [{"id": annotation_id, "completed_by": user, "was_cancelled": False,
                             "result": [{"from_name": "rank", "to_name": "answers", "type": "ranker",
                                         "origin": "manual", "value": value}]}]}


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
    assert result.output == (f"Error: {export} ranks with buckets (biased_results, relevant_results), and only "
                             "the project's labelling config says which is the best tier: pass --buckets with "
                             "them best first, or --label-config with the project's XML\n")
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
    windows = write_export(tmp_path / "bom.json", tasks,
                           lambda text: b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    zipped = write_export(tmp_path / "export.json.gz", tasks, lambda text: gzip.compress(text.encode()))
    assert json.loads(cli("ls", "import", windows, *BUCKETS).stdout)["new"] == 2
    again = json.loads(cli("ls", "import", zipped, *BUCKETS).stdout)
    assert (again["new"], again["unchanged"], again["quarantined"]) == (0, 2, 0)


@pytest.mark.parametrize("broken, reason, whole_task", [
    (lambda t: t.replace('"Another prompt"', '"Caf\xe9 prompt"').encode("latin-1"),
     "not valid UTF-8 (byte 0xe9 at offset ", True),
    (lambda t: t.replace('"completed_by": 2', '"completed_by": NaN').encode(),
     "holds NaN, which JSON does not allow", True),
    (lambda t: t.replace('"Another prompt"', '"Another \\u0000 prompt"').encode(),
     "task data 'prompt' holds a NUL character (\\u0000), which the database cannot store", False),
    (lambda t: t.replace('"id": 202', '"id": 99999999999999').encode(),
     "annotation id '99999999999999' is not a Label Studio id", False),
])
def test_a_task_the_database_cannot_take_is_quarantined_and_the_rest_imports(cli, tmp_path, broken, reason,
                                                                              whole_task):
    tasks = [gallery_task(1, 101), gallery_task(2, 202, "Another prompt", user=2), gallery_task(3, 303, "Third")]
    export = tmp_path / "export.json"
    export.write_bytes(broken(json.dumps(tasks, indent=1, ensure_ascii=False)))
    summary = json.loads(cli("ls", "import", export, *BUCKETS).stdout)
    assert (summary["new"], summary["quarantined"]) == (2, 1)
    (row,) = json.loads(cli("quarantine", "list", "--json").stdout)
    assert row["reason"].startswith(reason)
    shown = cli("quarantine", "show", row["id"]).stdout_bytes[:-1]
    if whole_task:  # a task that could not be read is kept byte for byte, as it was in the file
        assert shown in export.read_bytes() and shown.startswith(b"{") and b"\"id\": 2," in shown
    else:  # an annotation is kept with its task's data (see parse.payload)
        assert json.loads(shown)["task"]["id"] == 2
    again = json.loads(cli("ls", "import", export, *BUCKETS).stdout)
    assert (again["new"], again["quarantined"]) == (0, 0)


def test_a_task_whose_bytes_are_not_utf8_comes_back_exactly(cli, tmp_path):
    tasks = [gallery_task(1, 101), gallery_task(2, 202, "PLACEHOLDER")]
    text = json.dumps(tasks, indent=1)
    export = tmp_path / "export.json"
    export.write_bytes(text.replace("PLACEHOLDER", "caf\udce9").encode("utf-8", "surrogateescape"))
    json.loads(cli("ls", "import", export, *BUCKETS).stdout)
    (row,) = json.loads(cli("quarantine", "list", "--json").stdout)
    shown = cli("quarantine", "show", row["id"]).stdout_bytes[:-1]
    assert b"caf\xe9" in shown and shown in export.read_bytes()  # the task's bytes, exactly as written


@pytest.mark.parametrize("content, message", [
    (b"[" + b"[" * 100_000 + b"]" * 100_000 + b"]", "is nested too deeply to be read"),
    (b'[{"id": 1, "annotations": []}, {"id": 2, "data": "\x00"}]', "is not valid JSON after task 1"),
    ("[{}]".encode("utf-16"), "is UTF-16 text"),
])
def test_an_export_that_cannot_be_read_on_is_one_sentence(cli, tmp_path, content, message):
    export = tmp_path / "export.json"
    export.write_bytes(content)
    result = cli("ls", "import", export, *BUCKETS, expect_ok=False)
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "Traceback" not in result.output
    assert message in result.output


# --- property: `ls import` on anything ------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
    | st.sampled_from(["\x00", "\ud800", "relevant_results", "_", "llama_model"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8)


@st.composite
def export_tasks(draw):
    """A valid gallery task, one with a field replaced by any JSON value, or any JSON value at all."""
    task = gallery_task(draw(st.integers(1, 6)), draw(st.integers(1, 12)), draw(st.sampled_from(["p1", "p2"])),
                        user=draw(st.integers(1, 3)))
    value = task["annotations"][0]["result"][0]["value"]["ranker"]
    value["relevant_results"], value["biased_results"] = draw(st.sampled_from(
        [(RELEVANT, BIASED), (BIASED, RELEVANT), (RELEVANT + BIASED, [])]))
    kind = draw(st.sampled_from(["valid", "task field", "annotation field", "anything"]))
    if kind == "task field":
        task[draw(st.sampled_from(["id", "data", "annotations", "project"]))] = draw(json_values)
    elif kind == "annotation field":
        task["annotations"][0][draw(st.sampled_from(["id", "completed_by", "result", "was_cancelled"]))] = \
            draw(json_values)
    elif kind == "anything":
        return draw(json_values)
    return task


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(tasks_=st.lists(export_tasks(), max_size=6), ascii_only=st.booleans(), damage=st.none() | st.binary(max_size=4),
       at=st.floats(0, 1), compressed=st.booleans(), order_known=st.booleans())
def test_ls_import_on_anything_exits_cleanly_and_is_idempotent(db_url, tmp_path, tasks_, ascii_only, damage, at,
                                                              compressed, order_known):
    data = json.dumps(tasks_, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    if damage is not None:
        cut = int(len(data) * at)
        data = data[:cut] + damage + data[cut:]
    path = tmp_path / ("export.json.gz" if compressed else "export.json")
    path.write_bytes(gzip.compress(data) if compressed else data)
    flags = ["--buckets", "relevant_results,biased_results"] if order_known else []

    def run():
        result = CliRunner().invoke(root, ["--database-url", db_url, "ls", "import", str(path), *flags, "--json"])
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
        assert result.exit_code in (0, 1) and "Traceback" not in result.output
        if result.exit_code == 1:
            assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1
            return result.stderr
        return json.loads(result.stdout)

    first = run()
    before = counts(db_url, TABLES)
    second = run()
    assert counts(db_url, TABLES) == before  # importing again changes nothing
    assert dangling(db_url) == {}
    if isinstance(first, dict):
        assert isinstance(second, dict) and (second["new"], second["updated"]) == (0, 0)
    else:
        assert second == first
