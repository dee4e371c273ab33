"""What preflab saves is readable like every other file: the umask decides, not the library that wrote it.

safetensors 0.8 writes weights through a temporary file created 0600 and renames it
into place, so `model.safetensors` alone came out `-rw-------` in runs and in the
model cache, whose folder is made shareable on purpose.
"""

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from preflab.cli import cli
from tests.toy_data import one_thread, toy_base, toy_store  # noqa: F401 (fixtures)
from tests.training.retrain.retrain_fixtures import write_config
from tests.training.tiny_gguf import tiny_embedded_model  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

FAST = [
    "--max-steps",
    2,
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


@pytest.fixture
def umask_022():
    before = os.umask(0o022)
    yield
    os.umask(before)


def modes(folder: Path) -> dict[str, str]:
    """Every file and folder under `folder` (itself included) with its permission bits, e.g. '0o644'."""
    paths = [folder, *folder.rglob("*")]
    return {str(p.relative_to(folder)): oct(stat.S_IMODE(p.stat().st_mode)) for p in paths if not p.is_symlink()}


def assert_shareable(folder: Path) -> None:
    found = modes(folder)
    assert any(name.endswith(".safetensors") for name in found)
    expected = {name: "0o755" if (folder / name).is_dir() else "0o644" for name in found}
    assert found == expected


def test_a_converted_model_in_the_cache_is_readable_by_all(tmp_path, monkeypatch, umask_022, tiny_embedded_model):
    from preflab.lm.loading import resolve_model_path

    monkeypatch.setenv("PREFLAB_MODEL_CACHE", str(tmp_path / "cache"))
    assert_shareable(Path(resolve_model_path(tiny_embedded_model)))


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_every_file_of_a_saved_run_gets_the_umask_mode(toy_store, toy_base, tmp_path, umask_022, lora):
    url, _ = toy_store
    out = tmp_path / "run"
    args = [
        "--database-url",
        url,
        "train",
        "reward",
        "--model",
        str(toy_base),
        *map(str, FAST),
        "--output-dir",
        str(out),
        "--keep-checkpoints",
        "--json",
    ] + (["--lora", "--lora-r", "4"] if lora else [])
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert list((out / "checkpoints").glob("checkpoint-*/*.safetensors"))
    assert (out / "adapter").is_dir() == lora
    assert_shareable(out)
    # The dataset version exported for the run too (no version existed yet).
    (export,) = [e["path"] for e in report["elsewhere"] if "exported" in e["what"]]
    found = modes(Path(export))
    assert found == {name: "0o755" if (Path(export) / name).is_dir() else "0o644" for name in found}


def test_everything_a_retrain_writes_gets_the_umask_mode(sqlite_url, sample_rankings, tmp_path, umask_022):
    def run(*args):
        result = CliRunner().invoke(cli, ["--database-url", sqlite_url, *map(str, args)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result

    run("import", "rankings", sample_rankings)
    config = write_config(tmp_path / "retrain")
    trained = json.loads(run("retrain", "--config", config, "--json").stdout)
    assert trained["status"] == "trained"
    (folder,) = (tmp_path / "retrain" / "runs").iterdir()  # this retrain's folder: its dataset and both runs
    assert (folder / "dataset").is_dir() and len(list(folder.glob("*/model/model.safetensors"))) == 2
    assert_shareable(folder)


def test_the_toy_base_model_of_the_demos_gets_the_umask_mode(tmp_path, umask_022):
    # `demo toy`, `demo goodhart` and the pair-ranker bench start from it: its weights were 0600.
    from preflab.training.demos.toy_world import train_base_model

    assert_shareable(train_base_model(tmp_path / "base", steps=1, batch_size=4))
