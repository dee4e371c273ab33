"""Every command that generates takes the engine's options, made from `EngineConfig` with the field's own help.

`--model` stays each command's own (the model to load, or the served model's name); the key is
never an option.
"""

from __future__ import annotations

import dataclasses

import click
import pytest

from preflab.lm.engines.config import EngineConfig
from tests.commands.test_config_options import command

GENERATING = ["generate", "pipeline", "bon sample", "self-reward run"]


@pytest.mark.parametrize("path", GENERATING)
def test_generating_commands_take_the_engine_options(path):
    options = {p.name: p for p in command(path).params if isinstance(p, click.Option)}
    for f in dataclasses.fields(EngineConfig):
        if f.name == "model":
            continue
        assert f.name in options, f"`preflab {path}` has no --{f.name.replace('_', '-')}"
        assert options[f.name].help == f.metadata["help"]
    assert not any("key" in name for name in options), "the key comes from OPENAI_API_KEY only"


def test_an_engine_the_options_do_not_know_is_one_sentence(cli):
    result = cli("generate", "--engine", "openai", "--api-base", "ftp://example.org", "--model", "m", expect_ok=False)
    assert result.exit_code != 0 and "--api-base 'ftp://example.org' is not an http(s) URL" in result.output
    assert "Traceback" not in result.output
