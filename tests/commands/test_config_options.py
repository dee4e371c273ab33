"""Options are made from config dataclasses: every field is an option, declared once.

A field's help text lives in the dataclass; the command's option must carry that
same text, so an option typed by hand beside a config (the way they drift) fails.
"""

from __future__ import annotations

import dataclasses

import click
import pytest

from preflab.cli import cli


def command(path: str) -> click.Command:
    ctx = click.Context(cli, info_name="preflab")
    found: click.Command = cli
    for name in path.split():
        found = found.get_command(ctx, name)
        ctx = click.Context(found, parent=ctx, info_name=name)
    return found


def config(dotted: str):
    import importlib

    module, name = dotted.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


# command -> the configs its options are made from
CONFIGS = {
    "leaderboard": ["preflab.db.leaderboard.board.LeaderboardConfig"],
    "generate": ["preflab.labelling.generation.GenerateConfig"],
    "pipeline": ["preflab.labelling.pipeline.PipelineConfig", "preflab.labelling.generation.GenerateConfig"],
    "judge score": ["preflab.labelling.judges.score.ScoreConfig"],
    "judge reference": ["preflab.labelling.judges.score.ScoreConfig"],
    "judge pairwise": ["preflab.labelling.judges.pairwise.PairwiseConfig"],
    "judge reward-model": ["preflab.labelling.judges.reward_model.RewardModelConfig"],
    "judge likelihood": ["preflab.labelling.judges.likelihood.LikelihoodConfig"],
    "ls sync": ["preflab.labelling.studio.parse.TaskFields"],
    "ls push": ["preflab.labelling.active.SelectConfig"],
    "ls import": ["preflab.labelling.studio.parse.TaskFields"],
    "export": ["preflab.db.export.dataset.ExportSettings"],
    "annotators": ["preflab.db.quality.annotators.QualityConfig"],
    "pairs build": ["preflab.db.quality.annotators.QualityConfig"],
    "train reward": ["preflab.training.config.RewardTrainConfig"],
    "train dpo": ["preflab.training.config.DPOTrainConfig"],
    "train pair-ranker": ["preflab.training.pair_ranker.PairRankerTrainConfig"],
    "judge pair-ranker": ["preflab.labelling.judges.pair_ranker.PairRankerConfig"],
    "train eval": ["preflab.training.evaluate.EvalConfig"],
    "train rl": ["preflab.training.rl.RLTrainConfig"],
    "train simpo": ["preflab.training.simpo.SimPOTrainConfig"],
    "demo goodhart": ["preflab.training.goodhart.job.GoodhartSettings"],
    "bon sample": ["preflab.training.bestofn.config.BonSampleConfig"],
    "self-reward run": [
        "preflab.training.selfreward.config.SelfRewardConfig",
        "preflab.training.config.DPOTrainConfig",
    ],
    "demo toy": ["preflab.training.demos.toy_config.ToySettings"],
    "demo bon": ["preflab.training.demos.bon.BonDemoConfig"],
}


@pytest.mark.parametrize("path", sorted(CONFIGS))
def test_every_config_field_is_an_option_with_the_fields_help(path):
    cmd = command(path)
    helps = [p.help for p in cmd.params if isinstance(p, click.Option)]
    missing = []
    for dotted in CONFIGS[path]:
        for f in dataclasses.fields(config(dotted)):
            if not f.init:
                continue
            assert f.metadata.get("help"), f"{dotted}.{f.name} has no help text"
            if f.metadata["help"] not in helps:
                missing.append(f"{dotted.rsplit('.', 1)[1]}.{f.name}")
    assert not missing, f"`preflab {path}` has no option for {missing}"


def test_one_sampling_config_declares_the_sampling_fields():
    """temperature, top-p, max tokens, n and seed are declared once, in the model leaf."""
    from preflab.lm.sampling import SamplingConfig

    sampling = {f.name for f in dataclasses.fields(SamplingConfig)}
    for dotted in (
        "preflab.labelling.generation.GenerateConfig",
        "preflab.labelling.judges.score.ScoreConfig",
        "preflab.training.bestofn.config.BonSampleConfig",
        "preflab.training.selfreward.config.SelfRewardConfig",
    ):
        cls = config(dotted)
        assert issubclass(cls, SamplingConfig), dotted
        # A subclass may restate a field to change its default (the score judge: 3 samples of 192
        # tokens), as TRL's configs do; it may not add a sampling field of its own.
        redeclared = sampling & set(vars(cls).get("__annotations__", {})) - {"n", "max_new_tokens"}
        assert not redeclared, f"{dotted} redeclares {redeclared}"


def test_the_judges_that_read_a_causal_lm_take_generates_engine_options():
    """A judge of a causal LM runs on an engine, with the options `generate` has (declared once, in
    `engine_options`); a scorer's judge (a sequence classifier, `Judge.scorer`) has none."""
    from preflab.labelling.judges.table import JUDGES
    from preflab.lm.engines.config import EngineConfig

    names = {f.name for f in dataclasses.fields(EngineConfig)} - {"model"}  # --model is each command's own

    def engine_options(path: str) -> dict:
        return {p.name: (p.opts, p.help, p.default, p.envvar) for p in command(path).params if p.name in names}

    generate = engine_options("generate")
    assert set(generate) == names
    for kind, judge in JUDGES.items():
        assert engine_options(f"judge {kind}") == ({} if judge.scorer else generate), kind
