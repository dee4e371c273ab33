"""A retrain config over tiny models, for the retrain, lock and schedule tests.

from tests.training.retrain.retrain_fixtures import retrain_config
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tiny_models import tiny_causal_lm, tiny_reward_model, tiny_tokenizer

TRAIN = "per_device_train_batch_size = 4\nlearning_rate = 1e-3\nmax_length = 128\nuse_cpu = true\nlogging_steps = 1\n"


def write_config(
    folder: Path, reward: bool = True, dpo: bool = True, min_new: int = 10, lock_ttl: float = 60, max_steps: int = 2
) -> Path:
    """A TOML retrain config training a tiny reward model and/or a tiny DPO policy for `max_steps` steps."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = tiny_tokenizer()
    text = (
        f'min_new = {min_new}\nlock_ttl = {lock_ttl}\noutput_dir = "{folder / "runs"}"\n\n'
        '[pairs]\nstrategy = "all"\n\n[export]\ntest_size = 0.2\n\n'
    )
    if reward:
        rm = folder / "rm0" if (folder / "rm0").exists() else tiny_reward_model(folder / "rm0", tokenizer=tokenizer)
        text += f'[reward]\nmodel = "{rm}"\ngrouped = true\nmax_steps = {max_steps}\n{TRAIN}\n'
    if dpo:
        lm = folder / "lm0" if (folder / "lm0").exists() else tiny_causal_lm(folder / "lm0", tokenizer=tokenizer)
        # Reference log-probs precomputed (the default): for the max_steps × batch rows trained on only.
        text += f'[dpo]\nmodel = "{lm}"\nbeta = 0.1\nmax_steps = {max_steps}\n{TRAIN}\n'
    path = folder / "retrain.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def retrain_config(tmp_path) -> Path:
    return write_config(tmp_path / "retrain")
