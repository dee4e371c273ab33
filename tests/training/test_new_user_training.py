"""A new user's first training runs: the disk they leave, a held-out set that contradicts itself, retrain's help."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from preflab.cli import cli
from preflab.db.models import DatasetVersion, TrainingRun
from tests.toy_data import one_thread, toy_base, toy_store  # noqa: F401 (fixtures)
from tests.training.tiny_gguf import tiny_embedded_model  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

ONE_STEP = [
    "--max-steps",
    1,
    "--save-steps",
    1,
    "--per-device-train-batch-size",
    8,
    "--learning-rate",
    3e-3,
    "--max-length",
    16,
    "--use-cpu",
    "--seed",
    0,
]
# A model with a chat template trains on the pairs through it: the toy's digit pairs outgrow 16 tokens.
CHAT_STEP = [*ONE_STEP, "--max-length", 256]


def run(url, *args, expect_ok=True):
    result = CliRunner().invoke(cli, ["--database-url", url, *map(str, args)], catch_exceptions=False)
    if expect_ok:
        assert result.exit_code == 0, result.output
    return result


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def test_a_successful_run_deletes_its_checkpoints_and_says_what_it_left(toy_store, toy_base, tmp_path):
    url, _ = toy_store
    out = tmp_path / "run"
    line = run(url, "train", "reward", "--model", toy_base, *ONE_STEP, "--output-dir", out).output.strip()
    assert ": 1 step on " in line  # not "1 steps"
    assert not (out / "checkpoints").exists() and (out / "model").is_dir()
    left = folder_bytes(out)
    assert line.endswith("of checkpoints deleted; --keep-checkpoints keeps them)")
    assert "; the run left " in line

    kept = tmp_path / "kept"
    report = json.loads(
        run(
            url, "train", "reward", "--model", toy_base, *ONE_STEP, "--output-dir", kept, "--keep-checkpoints", "--json"
        ).stdout
    )
    assert list((kept / "checkpoints").glob("checkpoint-*"))
    assert report["freed_bytes"] == 0 and report["disk_bytes"] == folder_bytes(kept)
    assert left < report["disk_bytes"]  # what the checkpoints would have kept on disk


def test_what_the_run_left_counts_the_model_it_converted_and_the_dataset_it_exported(
    toy_store, tmp_path, monkeypatch, tiny_embedded_model
):
    # `train reward` run directly converted the embedded model (517 MB), uncounted by "the run left … on disk".
    import shutil

    from preflab.training.runs import disk_size

    url, sessions = toy_store
    cache = tmp_path / "cache"
    monkeypatch.setenv("PREFLAB_MODEL_CACHE", str(cache))
    first = json.loads(
        run(
            url,
            "train",
            "reward",
            "--model",
            tiny_embedded_model,
            *CHAT_STEP,
            "--output-dir",
            tmp_path / "first",
            "--json",
        ).stdout
    )
    with sessions.begin() as session:
        (export,) = session.scalars(select(DatasetVersion.path)).all()  # no version existed: made for the run
    converted = cache / tiny_embedded_model
    assert folder_bytes(converted) > 0 and folder_bytes(Path(export)) > 0
    assert first["disk_bytes"] == (
        folder_bytes(tmp_path / "first") + folder_bytes(converted) + folder_bytes(Path(export))
    )
    assert {(e["path"], e["bytes"]) for e in first["elsewhere"]} == {
        (str(converted), folder_bytes(converted)),
        (export, folder_bytes(Path(export))),
    }

    shutil.rmtree(cache)  # converted again by the next run, which says so
    line = run(
        url, "train", "reward", "--model", tiny_embedded_model, *CHAT_STEP, "--output-dir", tmp_path / "second"
    ).stdout.strip()
    total = folder_bytes(tmp_path / "second") + folder_bytes(converted)
    assert (
        f"; the run left {disk_size(total)} on disk ({disk_size(folder_bytes(converted))} in {converted}, "
        f"{tiny_embedded_model} converted for it; " in line
    )

    third = json.loads(
        run(
            url,
            "train",
            "reward",
            "--model",
            tiny_embedded_model,
            *CHAT_STEP,
            "--output-dir",
            tmp_path / "third",
            "--json",
        ).stdout
    )
    assert third["elsewhere"] == [] and third["disk_bytes"] == folder_bytes(tmp_path / "third")


@pytest.mark.postgres
def test_a_run_is_charged_only_for_the_export_it_made_itself(postgres_url, sample_rankings, tmp_path):
    # Two `train` commands at once on Postgres: the other's export, committed while this run was being
    # planned, was counted in this run's "left on disk" because the newest dataset version id had grown.
    from sqlalchemy import event

    from preflab.db.engine import open_database, session_factory
    from preflab.training.data import export_for_training
    from preflab.training.runs import plan_run

    run(postgres_url, "import", "rankings", sample_rankings)
    run(postgres_url, "pairs", "build")
    engine = open_database(postgres_url)
    sessions = session_factory(engine)
    theirs: list[str] = []

    def the_other_command_exports(conn, cursor, statement, parameters, context, executemany):
        # Right after this run's first look at the dataset versions, in its own transaction.
        if not theirs and "dataset_versions" in statement:
            theirs.append("")
            with sessions.begin() as other:
                theirs[0] = export_for_training(other, None).path

    event.listen(engine, "after_cursor_execute", the_other_command_exports)
    try:
        with sessions.begin() as session:
            plan = plan_run(session, "reward", {}, "someone/tiny-model", output_dir=str(tmp_path / "run"))
    finally:
        event.remove(engine, "after_cursor_execute", the_other_command_exports)
    assert theirs and theirs[0]
    with sessions.begin() as session:
        versions = session.scalars(select(DatasetVersion).order_by(DatasetVersion.id)).all()
    charged = [e["path"] for e in plan.elsewhere]
    assert theirs[0] not in charged
    if plan.export_path == theirs[0]:  # trained on the other command's export: nothing of it is this run's
        assert charged == [] and len(versions) == 1
    else:  # it exported its own: that one is charged
        assert charged == [plan.export_path] and [v.path for v in versions] == [theirs[0], plan.export_path]


def test_a_failed_run_keeps_its_checkpoint_for_resume(toy_store, toy_base, tmp_path):
    from transformers import TrainerCallback

    from preflab.errors import TrainingError
    from preflab.training.config import RewardTrainConfig
    from preflab.training.methods import train

    class PowerCut(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 3:
                raise RuntimeError("power cut")

    url, sessions = toy_store
    config = RewardTrainConfig(
        max_steps=4, save_steps=2, per_device_train_batch_size=8, learning_rate=3e-3, max_length=16, use_cpu=True
    )
    with pytest.raises(TrainingError, match="power cut"):
        train("reward", sessions, config, str(toy_base), output_dir=str(tmp_path / "run"), callbacks=[PowerCut()])
    assert [p.name for p in (tmp_path / "run" / "checkpoints").glob("checkpoint-*")] == ["checkpoint-2"]

    report = json.loads(run(url, "train", "reward", "--resume", "--json").stdout)
    assert report["resumed"] and report["freed_bytes"] > 0
    assert not (tmp_path / "run" / "checkpoints").exists()
    with sessions.begin() as session:
        assert session.scalars(select(TrainingRun.status)).all() == ["succeeded"]


def test_eval_warns_when_the_held_out_set_contradicts_itself(sqlite_url, toy_base, tmp_path):
    # People and a judge ranking the same responses in opposite orders, all exported together.
    lines = []
    for i in range(6):
        responses = [f"{i} 1 2 3", f"{i} 4 5 6"]
        lines.append(
            {
                "prompt": f"{i} 9 9 9 =",
                "responses": responses,
                "ranking": [[0], [1]],
                "annotator": "alice",
                "annotator_kind": "human",
                "id": f"h{i}",
            }
        )
        lines.append(
            {
                "prompt": f"{i} 9 9 9 =",
                "responses": responses,
                "ranking": [[1], [0]],
                "annotator": "judge",
                "annotator_kind": "ai",
                "id": f"a{i}",
            }
        )
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    run(sqlite_url, "import", "rankings", path)
    run(sqlite_url, "pairs", "build")
    run(sqlite_url, "export", tmp_path / "mixed", "--annotators", "any", "--test-size", "0.5")
    trained = json.loads(run(sqlite_url, "train", "reward", "--model", toy_base, *ONE_STEP, "--json").stdout)

    result = run(sqlite_url, "train", "eval", trained["model_version"])
    warning = next(x for x in result.stderr.splitlines() if x.startswith("warning:"))
    assert warning.startswith("warning: 6 of the 6 held-out pairs of ")
    assert (
        "contradict another (the same two responses in the opposite order), so no model scores above 0.500" in warning
    )
    report = json.loads(run(sqlite_url, "train", "eval", trained["model_version"], "--json").stdout)
    assert (report["heldout_contradicting_pairs"], report["heldout_accuracy_ceiling"]) == (6, 0.5)

    # The default export keeps people's pairs first: nothing to warn about.
    run(sqlite_url, "export", tmp_path / "people", "--test-size", "0.5", "--name", "people")
    result = run(sqlite_url, "train", "eval", trained["model_version"], "--dataset-version", "people")
    assert "warning:" not in result.stderr


def test_retrain_help_describes_the_config_instead_of_pointing_to_itself():
    def help_text(command):  # one line: the help wraps where the terminal ends
        return " ".join(CliRunner().invoke(cli, [command, "--help"]).output.split())

    text = help_text("retrain")
    assert "preflab retrain --help" not in text
    for table in ("[pairs]", "[export]", "[reward]", "[dpo]", "min_new", "start_from", "lock_ttl"):
        assert table in text
    assert "its keys: `preflab retrain --help`" in help_text("schedule")
