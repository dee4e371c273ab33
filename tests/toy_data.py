"""Preference data with a known answer for the training tests: the digit toy world.

    from tests.toy_data import toy_base, toy_store

- `toy_base`: a session fixture, a tiny Llama that has had a few dozen steps of the
  digit language (`preflab.training.demos.toy_world`), saved with its tokenizer.
- `load_toy_rankings(sessions, base, prompts, candidates)`: candidates sampled from
  it, ranked by the simulated annotator, imported, paired: the same path a user's
  rankings take.
- `one_thread`: import it to run a module's tests with one torch thread (tiny models).
- `toy_store`: a fresh SQLite database holding those pairs (60 prompts, 4
  candidates each), ready for `preflab train …`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The session fixture below may be the first to import transformers, before the per-test
# environment is set: the Hub must already be off then (huggingface_hub reads this on import).
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def load_toy_rankings(
    sessions, base: Path, workdir: Path, prompts: int = 60, candidates: int = 4, seed: int = 0
) -> int:
    """Import the simulated annotator's rankings of the base model's samples and build pairs."""
    from preflab.db.ingest.jsonl import import_file, import_rankings_batch
    from preflab.db.pairs.build import build_pairs
    from preflab.training.demos.toy import toy_rankings
    from preflab.training.demos.toy_config import ToySettings

    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"rankings-{seed}.jsonl"
    toy_rankings(base, ToySettings(prompts=prompts, candidates=candidates, seed=seed), path)
    import_file(sessions, path, import_rankings_batch)
    with sessions.begin() as session:
        return build_pairs(session).pairs


@pytest.fixture(scope="session")
def toy_base(tmp_path_factory) -> Path:
    import torch

    from preflab.training.demos.toy_world import train_base_model

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train_base_model(tmp_path_factory.mktemp("toy") / "base", steps=60, batch_size=64).resolve()
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def toy_store(tmp_path, toy_base, sqlite_url):
    """(database URL, sessionmaker) of a fresh SQLite database with the toy world's pairs."""
    from preflab.db.engine import open_database, session_factory

    sessions = session_factory(open_database(sqlite_url))
    load_toy_rankings(sessions, toy_base, tmp_path / "toy")
    return sqlite_url, sessions


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models on a shared CI machine: one intra-op thread is faster than contended two."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
