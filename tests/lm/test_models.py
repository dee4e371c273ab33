"""Model loading: hub ids, local folders and the embedded GGUF name resolve the way users expect."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from preflab.errors import ConfigError
from preflab.lm.loading import (
    load_causal_lm,
    load_sequence_scorer,
    model_cache_dir,
    model_label,
    prefer_reusable_attention,
    resolve_model_path,
)
from tests.tiny_models import tiny_causal_lm, tiny_reward_model, tiny_tokenizer
from tests.training.tiny_gguf import tiny_embedded_model  # noqa: F401 (fixture)


def test_names_resolve_to_folders_hub_ids_or_the_model_cache(tmp_path, monkeypatch):
    assert resolve_model_path("someone/some-model") == "someone/some-model"
    assert model_label("someone/some-model") == "someone/some-model"
    assert model_label(None) == model_label("smollm2-135m-instruct") == "smollm2-135m-instruct"
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="not a model folder"):
        resolve_model_path(tmp_path / "empty")


def test_one_model_cache_however_preflab_is_started(tmp_path, monkeypatch, tiny_embedded_model):
    # Run directly (not by `make`), `preflab train` converted the embedded model again under
    # PREFLAB_HOME: 517 MB more. The cache is the user's, whatever PREFLAB_HOME says.
    import platformdirs

    monkeypatch.delenv("PREFLAB_MODEL_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))  # so the conversion below stays out of the real ~/.cache
    home = Path(os.environ["PREFLAB_HOME"])  # set by the autouse fixture
    # ~/.cache/preflab/models on Linux (what the README says); the platform's user cache elsewhere.
    assert model_cache_dir() == Path(platformdirs.user_cache_dir("preflab", appauthor=False)) / "models"
    if sys.platform.startswith("linux"):
        assert model_cache_dir() == tmp_path / "user" / ".cache" / "preflab" / "models"
    assert resolve_model_path(tiny_embedded_model) == model_cache_dir() / tiny_embedded_model
    assert (model_cache_dir() / tiny_embedded_model / "model.safetensors").is_file()
    assert not (home / "models").exists()
    monkeypatch.setenv("PREFLAB_MODEL_CACHE", str(tmp_path / "shared"))
    assert model_cache_dir() == tmp_path / "shared"


def test_a_tokenizer_without_chat_template_gets_a_plain_one_and_left_padding(tmp_path):
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = None
    path = tiny_causal_lm(tmp_path / "base-lm", tokenizer=tokenizer)
    model, loaded = load_causal_lm(path)
    assert loaded.padding_side == "left" and loaded.pad_token_id is not None
    text = loaded.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "User: Hi\n\nAssistant:"
    assert str(model.device) == "cpu" and not model.training


def test_a_reward_model_must_have_one_label(tmp_path):
    model, _ = load_sequence_scorer(tiny_reward_model(tmp_path / "rm"))
    assert model.config.num_labels == 1
    with pytest.raises(ConfigError, match="has 3 labels"):
        load_sequence_scorer(tiny_reward_model(tmp_path / "cls", num_labels=3))


@pytest.fixture
def cudnn_attention_flag():
    import torch

    before = torch.backends.cuda.cudnn_sdp_enabled()
    yield torch.backends.cuda.cudnn_sdp_enabled
    torch.backends.cuda.enable_cudnn_sdp(before)


def test_cudnn_attention_is_left_out_on_a_gpu_and_untouched_without_one(monkeypatch, cudnn_attention_flag):
    # Its per-shape graph cost 30 ms of CPU per call on an H100 (bench/README.md, "On a GPU").
    import torch

    torch.backends.cuda.enable_cudnn_sdp(True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    prefer_reusable_attention()
    assert cudnn_attention_flag()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    prefer_reusable_attention()
    assert not cudnn_attention_flag()
