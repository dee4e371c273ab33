"""The table of judges drives the `judge` commands: one command per kind, made from its entry."""

from __future__ import annotations

import dataclasses

import click

from preflab.cli import cli
from preflab.labelling.judges.table import JUDGES, LM_JUDGES, SCORER_JUDGES


def test_every_judge_in_the_table_is_a_command_made_from_its_entry():
    ctx = click.Context(cli, info_name="preflab")
    group = cli.get_command(ctx, "judge")
    assert set(group.list_commands(ctx)) == {*JUDGES, "report"}
    for kind, judge in JUDGES.items():
        command = group.get_command(ctx, kind)
        assert command.help == judge.help
        params = {p.name: p for p in command.params}
        assert {f.name for f in dataclasses.fields(judge.config)} <= set(params), kind
        # A judge whose model is its own trained artefact names it as an argument; the others take --model.
        assert isinstance(params["model_name"], click.Argument) == (judge.model_argument is not None), kind


def test_the_kinds_callers_choose_from_come_from_the_table():
    from preflab.labelling.pipeline import PipelineConfig

    assert SCORER_JUDGES == ("reward-model", "pair-ranker")
    assert LM_JUDGES == ("likelihood", "pairwise", "score")
    choices = next(f for f in dataclasses.fields(PipelineConfig) if f.name == "judge").metadata["choices"]
    assert choices[:-1] == LM_JUDGES
