"""The same entry points under `torchrun`: two CPU processes (gloo), one recorded run."""

import json
import os
import subprocess
import sys

import pytest
from sqlalchemy import select

from preflab.db.models import ModelVersion, TrainingRun
from tests.toy_data import one_thread, toy_base, toy_store  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slow

COMMON = [
    "--max-steps",
    6,
    "--per-device-train-batch-size",
    4,
    "--logging-steps",
    2,
    "--max-length",
    16,
    "--use-cpu",
    "--json",
]


@pytest.mark.parametrize(
    "command",
    [["reward", "--grouped", "--learning-rate", 3e-3], ["dpo", "--learning-rate", 1e-3]],
    ids=["reward-grouped", "dpo"],
)
def test_torchrun_trains_on_two_processes_and_records_one_run(toy_store, toy_base, tmp_path, command):
    from safetensors.torch import load_file

    url, sessions = toy_store
    env = dict(os.environ, OMP_NUM_THREADS="1", PREFLAB_HOME=str(tmp_path / "home"), HF_HUB_OFFLINE="1")
    args = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "preflab",
        "--database-url",
        url,
        "train",
        *command,
        "--model",
        toy_base,
        *COMMON,
    ]
    done = subprocess.run(list(map(str, args)), capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    # Rank 0 alone prints: one JSON document on stdout.
    report = json.loads(done.stdout[done.stdout.index("{") :])
    assert report["world_size"] == 2 and report["metrics"]["world_size"] == 2
    assert report["metrics"]["global_step"] == 6 and report["metrics"]["first_loss"] is not None
    with sessions.begin() as session:
        (run,) = session.scalars(select(TrainingRun)).all()  # exactly one run, though two processes trained
        assert (run.status, run.world_size, run.output_model_version_id) == ("succeeded", 2, report["model_version_id"])
        kinds = session.scalars(select(ModelVersion.kind).order_by(ModelVersion.id)).all()
        assert kinds == ["base", "reward" if command[0] == "reward" else "policy"]
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not load_file(f"{report['path']}/model.safetensors")[name].equal(
        load_file(f"{toy_base}/model.safetensors")[name]
    )
