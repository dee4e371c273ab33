"""AI predictions on every template are stored by Label Studio, and `ls predict` says what the server refused."""

import json

import pytest
from label_studio_sdk.label_interface import LabelInterface

from preflab.labelling.studio.predict import prediction_result
from preflab.templates import TEMPLATES, bucket_names, label_config
from tests.labelling.ls_helpers import tasks, unique

# For each template: a judge's ranking of the task's candidates (indexes into the responses).
RANKINGS = {"ranking": [[2], [0], [1]], "ranking_tiers": [[2], [0, 1]], "pairwise": [[1], [0]]}


@pytest.mark.parametrize(
    "template, tiers, shown",
    [
        ("ranking", [[3], [1], [2]], [1, 2, 3]),
        ("ranking_tiers", [[3, 1], [2]], [1, 2, 3, 4]),
        ("pairwise", [[2], [1]], [1, 2]),
        ("pairwise", [[1], [2]], [1, 2]),
        ("pairwise", [[1, 2]], [1, 2]),
    ],
)
def test_every_template_prediction_passes_label_studio_validator(template, tiers, shown):
    config = label_config(template)
    result = prediction_result(template, tiers, shown, bucket_names(config))
    errors = LabelInterface(config).validate_prediction({"task": 1, "result": result}, return_errors=True)
    assert errors == []


def judged_file(path, responses, ranking, prompt):
    path.write_text(
        json.dumps(
            {
                "prompt": prompt,
                "responses": responses,
                "ranking": ranking,
                "annotator": "judge-alpha",
                "annotator_kind": "ai",
            }
        )
        + "\n"
    )
    return path


@pytest.mark.parametrize("template", TEMPLATES)
def test_predictions_of_every_template_are_stored_by_the_server(template, lcli, sqlite_url, ls_env, tmp_path):
    server = ls_env
    responses = [unique("yes"), unique("no"), unique("sometimes")][: 2 if template == "pairwise" else 3]
    ranking = RANKINGS[template]
    lcli("import", "rankings", judged_file(tmp_path / "judged.jsonl", responses, ranking, unique("Is the sky blue?")))
    pid = json.loads(lcli("ls", "init", "--template", template, "--title", unique(template), "--json").stdout)[
        "project_id"
    ]
    lcli("ls", "push", "--project", pid)
    (task,) = tasks(sqlite_url)

    result = lcli("ls", "predict", "--project", pid)
    assert result.output.strip() == (
        f"uploaded 1 prediction to project {pid} (0 already there, 0 the template cannot show)"
    )
    (stored,) = server.sdk().predictions.list(task=task["id"])
    assert stored.model_version == "judge-alpha"
    # What the server holds reads back as the judge's ranking.
    lcli("ls", "sync", "--project", pid)
    config = server.sdk().projects.get(pid).label_config
    assert (
        LabelInterface(config).validate_prediction({"task": task["id"], "result": stored.result}, return_errors=True)
        == []
    )
    if template == "pairwise":
        by_text = dict(zip(task["texts"], task["shown"]))
        better = by_text[responses[ranking[0][0]]]
        assert stored.result[0]["value"]["selected"] == ("left" if task["shown"][0] == better else "right")


def test_predict_reports_what_the_server_refused(lcli, sqlite_url, ls_env, tmp_path):
    server = ls_env
    responses = [unique("red"), unique("green"), unique("blue")]
    lcli(
        "import",
        "rankings",
        judged_file(tmp_path / "judged.jsonl", responses, [[1], [0], [2]], unique("Name a colour.")),
    )
    pid = json.loads(lcli("ls", "init", "--title", unique("refused"), "--json").stdout)["project_id"]
    lcli("ls", "push", "--project", pid)
    (task,) = tasks(sqlite_url)
    # Someone renames the Ranker in Label Studio: preflab's predictions no longer fit the project.
    config = server.sdk().projects.get(pid).label_config
    server.sdk().projects.update(pid, label_config=config.replace('name="rank"', 'name="order"'))

    result = lcli("ls", "predict", "--project", pid, "--json", expect_ok=False)
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert (report["uploaded"], report["refused"]) == (0, 1)
    assert "Label Studio refused 1 of the 1 prediction sent" in result.stderr
    assert server.sdk().predictions.list(task=task["id"]) == []
