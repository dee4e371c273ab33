"""A store that has everything the report shows, built once per test module.

    from tests.report.store import full_store, run_cli, run_report

- the bundled sample rankings (three people and two AI annotators on 40 prompts),
  one more ranking by an annotator whose name is an email, and a line that is
  quarantined;
- the digit toy world's self-rewarding loop, one iteration: M_0 (base) → M_1 (DPO
  policy), its judge (a reward-model judge), dataset version and training run;
  then the simulated person ranks that iteration's candidates;
- pairs and an exported dataset version; a reward model and a plain DPO policy
  trained from M_0 (a few steps); best-of-n draws scored by that reward model.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from tests.training.selfreward.selfreward_world import human_rankings_of, toy_base, toy_world  # noqa: F401 (fixtures)

EMAIL = "alice.researcher@example.com"
SECRETS = ("LABEL_STUDIO_API_KEY", "HF_TOKEN", "PREFLAB_DATABASE_URL", "LABEL_STUDIO_URL", "PREFLAB_MODEL")
# A few steps: the report needs the runs and models to exist, not to be good.
SHORT = [
    "--max-steps",
    3,
    "--max-length",
    16,
    "--use-cpu",
    "--logging-steps",
    1,
    "--save-steps",
    1000,
    "--per-device-train-batch-size",
    8,
]


@dataclass
class FullStore:
    url: str
    root: Path
    sessions: object
    reward_model: str
    emails: tuple[str, ...] = (EMAIL,)


def run_cli(url: str, *args) -> str:
    """`preflab --database-url URL ARGS…` in-process; returns stdout."""
    from preflab.cli import cli

    result = CliRunner().invoke(cli, ["--database-url", url, *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def run_report(url: str, *args) -> str:
    """`preflab report ARGS…` on the database at `url`; returns stdout."""
    from preflab.commands.report import page_command
    from preflab.settings import Settings

    result = CliRunner().invoke(
        page_command, list(map(str, args)), obj=Settings(database_url=url), catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return result.stdout


def write_extra_rankings(path: Path) -> Path:
    """One ranking by an annotator named by an email, and one line that cannot be parsed."""
    lines = [
        json.dumps(
            {
                "prompt": "Which planet has the shortest year, and why?",
                "responses": [
                    "Mercury: it is the closest planet to the Sun, so its orbit is the shortest.",
                    "Mars, because it is red.",
                    "Neptune.",
                ],
                "ranking": [[0], [1], [2]],
                "annotator": EMAIL,
                "annotator_kind": "human",
                "id": "extra-1",
            }
        ),
        json.dumps(
            {
                "prompt": "A prompt whose ranking points past its responses",
                "responses": ["a", "b"],
                "ranking": [[0], [5]],
                "annotator": EMAIL,
                "annotator_kind": "human",
                "id": "extra-2",
            }
        ),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def build(root: Path, world, sample: Path) -> FullStore:
    from preflab.db.engine import open_sessions
    from preflab.db.models import DatasetVersion, ModelVersion

    url = f"sqlite:///{root / 'full.db'}"
    sessions = open_sessions(url)
    run_cli(url, "import", "rankings", sample)
    run_cli(url, "import", "rankings", write_extra_rankings(root / "extra.jsonl"))
    run_cli(
        url, "self-reward", "--iterations", 1, "--output-dir", root / "loop", *world.loop_args(prompts_per_iteration=32)
    )
    # The simulated person ranks the loop's candidates: human–AI agreement, and the judge's agreement with people.
    assert human_rankings_of(sessions, 1, root / "people.jsonl") > 0
    run_cli(url, "import", "rankings", root / "people.jsonl")
    run_cli(url, "pairs", "build")
    run_cli(url, "export", root / "export", "--format", "jsonl")
    with sessions.begin() as session:
        loop_dataset = session.scalar(select(DatasetVersion.name).where(DatasetVersion.iteration == 1))
        policy = session.scalar(select(ModelVersion.name).where(ModelVersion.iteration == 1))
    reward = json.loads(
        run_cli(
            url,
            "train",
            "reward",
            "--model",
            world.base,
            "--dataset-version",
            loop_dataset,
            "--output-dir",
            root / "reward",
            *SHORT,
            "--json",
        )
    )
    run_cli(
        url,
        "train",
        "dpo",
        "--model",
        world.base,
        "--dataset-version",
        loop_dataset,
        "--output-dir",
        root / "dpo",
        *SHORT,
        "--beta",
        0.1,
        "--json",
    )
    run_cli(
        url,
        "bon",
        "sample",
        "--reward-model",
        reward["model_version"],
        "--policy",
        policy,
        "--n",
        4,
        "--prompts",
        world.eval_prompts,
        "--max-new-tokens",
        5,
        "--batch-size",
        16,
        "--json",
    )
    return FullStore(url, root, sessions, reward["model_version"])


@pytest.fixture(scope="module")
def full_store(tmp_path_factory, toy_world, sample_rankings_path) -> FullStore:
    import torch

    root = tmp_path_factory.mktemp("report-store")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: more threads only add synchronisation
    with pytest.MonkeyPatch.context() as env:
        for name in SECRETS:
            env.delenv(name, raising=False)
        env.setenv("PREFLAB_HOME", str(root / "home"))
        env.setenv("HF_HUB_OFFLINE", "1")
        env.setenv("HF_DATASETS_CACHE", str(root / "hf-datasets"))
        try:
            yield build(root, toy_world, sample_rankings_path)
        finally:
            torch.set_num_threads(threads)
            from preflab.db.engine import dispose_all

            dispose_all()
    shutil.rmtree(root / "loop", ignore_errors=True)


@pytest.fixture(scope="module")
def sample_rankings_path() -> Path:
    from importlib.resources import files

    return Path(str(files("preflab.db.samples") / "rankings.jsonl"))
