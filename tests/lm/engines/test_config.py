"""The engine's options: generated from EngineConfig, read from the environment, checked in one sentence."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from preflab.commands.options import build_config, config_options
from preflab.errors import ConfigError
from preflab.lm.engines import EngineConfig


@click.command()
@config_options(EngineConfig)
def show(**options):
    config = build_config(EngineConfig, options)
    click.echo(f"{config.engine} {config.urls() if config.engine == 'openai' else '-'} {config.concurrency}")


def run(*args):
    return CliRunner().invoke(show, list(args))


def test_the_options_come_from_the_config_and_the_key_is_none_of_them():
    help_text = run("--help").output
    for flag in (
        "--engine",
        "--api-base",
        "--model",
        "--concurrency",
        "--timeout",
        "--max-retries",
        "--price-in",
        "--price-out",
    ):
        assert flag in help_text
    assert "--api-key" not in help_text and "OPENAI_API_KEY" in help_text


def test_the_engine_and_the_url_default_from_the_environment(monkeypatch):
    assert run().output.strip() == "transformers - 32"
    monkeypatch.setenv("PREFLAB_ENGINE", "openai")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000")
    assert run("--model", "m").output.strip() == "openai ['http://127.0.0.1:8000/v1'] 32"
    result = run("--model", "m", "--api-base", "http://a:1/v1,http://b:2", "--concurrency", "64")
    assert result.output.strip() == "openai ['http://a:1/v1', 'http://b:2/v1'] 64"
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert run("--model", "m").output.strip() == "openai ['https://api.openai.com/v1'] 32"


@pytest.mark.parametrize(
    ("settings", "sentence"),
    [
        ({"engine": "vllm"}, "--engine must be one of transformers, openai, got 'vllm'"),
        ({"engine": "openai"}, "--engine openai needs --model: the served model's name"),
        (
            {"engine": "openai", "model": "m", "api_base": "localhost:8000"},
            "--api-base 'localhost:8000' is not an http(s) URL (e.g. http://127.0.0.1:8000/v1)",
        ),
        ({"concurrency": 0}, "--concurrency must be at least 1, got 0"),
        ({"max_retries": -1}, "--max-retries cannot be negative, got -1"),
        ({"price_out": -1.0}, "--price-in and --price-out cannot be negative"),
    ],
)
def test_a_bad_setting_is_one_sentence(settings, sentence):
    with pytest.raises(ConfigError) as refused:
        EngineConfig(**settings)
    assert str(refused.value) == sentence
