"""`preflab retrain`: nothing to do, then training, current model versions, and a failure that keeps them."""

import json

import pytest
from sqlalchemy import select

from preflab.db.models import DatasetVersion, ModelVersion, TrainingRun
from tests.training.retrain.retrain_fixtures import retrain_config, write_config  # noqa: F401 (fixture)
from tests.training.selfreward.selfreward_world import one_torch_thread  # noqa: F401 (fixture)
from tests.training.step_lines import matches, stderr_is_a_log, step_line, step_lines  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out


def new_rankings(path, n: int = 3, tag: str = "late"):
    lines = [
        json.dumps(
            {
                "prompt": f"{tag} question {i}: what is {i} plus {i}?",
                "responses": [f"It is {2 * i}.", f"Maybe {2 * i + 1}.", "No idea."],
                "ranking": [[0], [1], [2]],
                "annotator": "alice",
                "id": f"{tag}-{i}",
            }
        )
        for i in range(n)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def current(session) -> dict:
    return {v.kind: v.name for v in session.scalars(select(ModelVersion).where(ModelVersion.is_current.is_(True)))}


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread", "stderr_is_a_log")
def test_retrain_trains_when_enough_is_new_and_a_failure_keeps_the_current_models(
    cli, sessions, retrain_config, sample_rankings, tmp_path, monkeypatch
):
    empty = json.loads(cli("retrain", "--config", retrain_config, "--json").stdout)
    assert (empty["status"], empty["new_comparisons"]) == ("nothing-to-do", 0)
    assert "nothing to do" in cli("retrain", "--config", retrain_config).stdout

    cli("import", "rankings", sample_rankings)
    waiting = json.loads(cli("retrain", "--config", retrain_config, "--min-new", 100_000, "--json").stdout)
    assert waiting["status"] == "nothing-to-do" and waiting["new_comparisons"] > 100

    result = cli("retrain", "--config", retrain_config, "--json")
    trained = json.loads(result.stdout)  # stdout is the JSON alone; the progress went to stderr
    assert trained["status"] == "trained" and [r["kind"] for r in trained["runs"]] == ["reward", "dpo"]
    # `retrain --json > out.json 2> log` under cron: the log says each run's steps.
    for run in ("reward-grouped run 1", "dpo run 2"):  # the retrain config trains a grouped reward model
        lines = step_lines(result.stderr, run)
        assert lines[0] == f"training {run}: 2 steps" and len(lines) == 3, result.stderr
        assert matches(step_line(run, 1, 2), lines[1]) and matches(step_line(run, 2, 2, left="0s"), lines[2])
    reward, policy = (r["model_version"] for r in trained["runs"])
    with sessions.begin() as session:
        assert current(session) == {"reward": reward, "policy": policy}
        version = session.scalars(select(DatasetVersion).where(DatasetVersion.name == trained["dataset_version"])).one()
        assert version.settings["job"] == "retrain" and version.settings["trained"] is True
        # The export keeps people's pairs first: a judge's pairs on prompts people ranked are left out.
        left_out = sum(version.settings["left_out_by_kind"].values())
        assert version.n_train + version.n_test + left_out == trained["new_comparisons"]
        assert [r.status for r in session.scalars(select(TrainingRun))] == ["succeeded", "succeeded"]

    # Nothing new since that dataset version: nothing to do.
    again = json.loads(cli("retrain", "--config", retrain_config, "--json").stdout)
    assert (again["status"], again["new_comparisons"], again["since"]) == ("nothing-to-do", 0, version.name)

    # Nine new pairs arrive; the reward model's training fails: the previous versions stay current.
    cli("import", "rankings", new_rankings(tmp_path / "late.jsonl"))
    monkeypatch.setenv("PREFLAB_FAIL_AT", "retrain:train")
    failed = cli("retrain", "--config", retrain_config, "--min-new", 9, expect_ok=False)
    assert failed.exit_code == 1
    assert "stays current" in failed.output and "injected failure at retrain:train" in failed.output
    with sessions.begin() as session:
        assert current(session) == {"reward": reward, "policy": policy}
        runs = session.scalars(select(TrainingRun).order_by(TrainingRun.id)).all()
        assert [r.status for r in runs] == ["succeeded", "succeeded", "failed", "failed"]
        assert "injected failure" in runs[-1].error
        assert (
            session.scalar(
                select(ModelVersion).where(ModelVersion.kind == "policy", ModelVersion.is_current.is_(False))
            )
            is None
        )

    # The failed retrain did not count: the next run sees the same nine comparisons and trains.
    monkeypatch.delenv("PREFLAB_FAIL_AT")
    recovered = json.loads(cli("retrain", "--config", retrain_config, "--min-new", 9, "--json").stdout)
    assert recovered["status"] == "trained" and recovered["new_comparisons"] == 9
    assert recovered["since"] == version.name
    with sessions.begin() as session:
        assert current(session) == {
            "reward": recovered["runs"][0]["model_version"],
            "policy": recovered["runs"][1]["model_version"],
        }


def test_retrain_config_mistakes_are_one_sentence(cli, tmp_path):
    config = tmp_path / "retrain.toml"
    config.write_text("min_new = 5\n[reward]\nlearning_rat = 0.1\n", encoding="utf-8")
    result = cli("retrain", "--config", config, expect_ok=False)
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {config}: unknown key 'learning_rat' in [reward]")
    config.write_text("min_new = 5\n", encoding="utf-8")
    assert "trains nothing" in cli("retrain", "--config", config, expect_ok=False).output
    config.write_text("min_new = \n", encoding="utf-8")
    assert "is not valid TOML" in cli("retrain", "--config", config, expect_ok=False).output
    result = cli("retrain", expect_ok=False)
    assert result.exit_code == 1 and "no retrain config: pass --config FILE" in result.output
    json_config = write_config(tmp_path / "j", reward=True, dpo=False).with_suffix(".json")
    json_config.write_text(json.dumps({"min_new": 3, "reward": {"max_steps": 1}}), encoding="utf-8")
    assert json.loads(cli("retrain", "--config", json_config, "--json").stdout)["status"] == "nothing-to-do"


def test_a_run_with_nothing_to_do_stays_light(tmp_path):
    """The scheduler starts `preflab retrain` often; when there is nothing to train it never loads torch."""
    import subprocess
    import sys

    config = tmp_path / "retrain.toml"
    config.write_text("min_new = 1\n[dpo]\nbeta = 0.1\n", encoding="utf-8")
    code = (
        "import sys; from click.testing import CliRunner; from preflab.cli import cli\n"
        "r = CliRunner().invoke(cli, ['--database-url', sys.argv[1], 'retrain', '--config', sys.argv[2]])\n"
        "assert r.exit_code == 0 and 'nothing to do' in r.output, r.output\n"
        "print(sorted(m for m in ('torch', 'transformers', 'trl', 'datasets') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, f"sqlite:///{tmp_path / 'x.db'}", str(config)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_retrain_job_writes_the_report_page_after_each_run(cli, tmp_path, sample_rankings):
    """`report = "path"` in the config: the scheduled job leaves an up-to-date page behind, even idle."""
    page = tmp_path / "team" / "report.html"
    config = tmp_path / "retrain.toml"
    config.write_text(f'min_new = 1000000\nreport = "{page}"\n[dpo]\nbeta = 0.1\n', encoding="utf-8")
    cli("import", "rankings", sample_rankings)
    result = cli("retrain", "--config", config)
    assert "nothing to do" in result.stdout
    html = page.read_text(encoding="utf-8")
    assert 'id="data"' in html and 'id="agreement"' in html
    bad = tmp_path / "bad.toml"
    bad.write_text('report = ""\n[dpo]\nbeta = 0.1\n', encoding="utf-8")
    assert "report must be the path of an HTML file" in cli("retrain", "--config", bad, expect_ok=False).output
