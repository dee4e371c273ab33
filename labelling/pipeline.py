"""The main job, end to end, on the configured database (`preflab pipeline`).

Steps, each the library job behind a CLI command: import the rankings (the
bundled sample unless `rankings` is given); generate candidates for the first
prompts of a prompts file (the bundled sample unless `prompts`) with the
configured model and rank every prompt's candidates with an AI judge; build
pairs, report agreement, export a dataset version. Re-running it is idempotent
up to the export, which records a new dataset version: generation tops up to N
and the judge keeps the rankings it already wrote.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.db.export.dataset import FORMATS, ExportSettings
from preflab.db.export.job import export_and_push, version_info
from preflab.db.ingest.jsonl import import_file, import_rankings_batch
from preflab.db.pairs.build import STRATEGIES, build_pairs
from preflab.db.quality.agreement import stats
from preflab.errors import ConfigError
from preflab.labelling.generation import GenerateConfig, run_generation
from preflab.labelling.judges.run import run_judge
from preflab.labelling.judges.table import JUDGES, LM_JUDGES
from preflab.lm.engines.config import EngineConfig
from preflab.lm.names import ModelCache
from preflab.settings import data_dir

NO_JUDGE = "none"
# The pipeline's own generation defaults: short replies, so a first run on a CPU takes seconds.
GENERATE_DEFAULTS = {"max_new_tokens": 40, "batch_size": 16}


def sample_rankings_path() -> Path:
    return Path(str(files("preflab.db.samples") / "rankings.jsonl"))


def sample_prompts_path() -> Path:
    return Path(str(files("preflab.db.samples") / "prompts.jsonl"))


@dataclass
class PipelineConfig:
    """What the pipeline imports, which judge it runs and how it exports (generation: `GenerateConfig`)."""

    rankings: str | None = field(
        default=None, metadata={"help": "JSON Lines rankings to import (default: the bundled sample)."}
    )
    prompts: str | None = field(
        default=None, metadata={"help": "JSON Lines prompts to generate for (default: the bundled sample)."}
    )
    max_prompts: int = field(default=4, metadata={"help": "Prompts to generate candidates for."})
    generate: bool = field(
        default=True, metadata={"help": "Generate candidates (--no-generate: judge the stored candidates only)."}
    )
    judge: str = field(
        default="likelihood",
        metadata={"help": "The AI judge that ranks every prompt's candidates.", "choices": (*LM_JUDGES, NO_JUDGE)},
    )
    strategy: str = field(
        default="all",
        metadata={"help": "Which pairs of a ranking to keep (see `preflab pairs build`).", "choices": STRATEGIES},
    )
    format: str = field(default="disk", metadata={"help": "Export format (see `preflab export`).", "choices": FORMATS})
    out: str | None = field(default=None, metadata={"help": "Export folder (default: DATA_DIR/exports/latest)."})

    def __post_init__(self) -> None:
        if self.max_prompts < 1:
            raise ConfigError(f"--max-prompts must be at least 1, got {self.max_prompts}")
        choices = {"judge": (*LM_JUDGES, NO_JUDGE), "strategy": STRATEGIES, "format": FORMATS}
        for name, allowed in choices.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ConfigError(f"--{name} must be one of {', '.join(allowed)}, got {value!r}")

    @property
    def out_dir(self) -> Path:
        return Path(self.out) if self.out else data_dir() / "exports" / "latest"


def judge_config(kind: str, generation: GenerateConfig):
    """The judge's default config; a judge that writes replies (score) writes within the pipeline's token budget."""
    config = JUDGES[kind].config()
    if hasattr(config, "max_new_tokens"):
        config = dataclasses.replace(config, max_new_tokens=generation.max_new_tokens)
    return config


def run_pipeline(
    sessions: sessionmaker[Session],
    model_name: str,
    config: PipelineConfig,
    generation: GenerateConfig,
    reporter: Reporter = SILENT,
    *,
    engine: EngineConfig | None = None,
) -> dict[str, Any]:
    """Import, generate, judge, build pairs, report agreement and export; one dict per step.

    Args:
        model_name: `--model NAME`: the model that generates and judges (loaded once; on a
            server, the served model's name).
        generation: how candidates are sampled (`preflab generate`'s config).
        engine: where generation and judging run (default: in this process).
    """
    report: dict[str, Any] = {}
    report["import"] = import_file(
        sessions, config.rankings or sample_rankings_path(), import_rankings_batch, reporter=reporter
    ).as_dict()
    models = ModelCache()
    # In a log (`make run > log`) each slow step says it starts: loading a model can take a minute before any line.
    if config.generate:
        reporter.step(f"pipeline: generating candidates for up to {config.max_prompts} prompts with {model_name}")
        report["generate"] = run_generation(
            sessions,
            model_name,
            generation,
            prompts=config.prompts or sample_prompts_path(),
            max_prompts=config.max_prompts,
            engine=engine,
            cache=models,
            reporter=reporter,
        ).as_dict()
    if config.judge != NO_JUDGE:
        reporter.step(f"pipeline: ranking every prompt's candidates with the {config.judge} judge")
        report["judge"] = run_judge(
            sessions,
            config.judge,
            judge_config(config.judge, generation),
            model_name,
            engine=engine,
            cache=models,
            reporter=reporter,
        ).as_dict()
    models.clear()
    with sessions.begin() as session:
        report["pairs"] = build_pairs(session, strategy=config.strategy).as_dict()
    with sessions.begin() as session:
        report["stats"] = stats(session)
    report["export"] = version_info(export_and_push(sessions, config.out_dir, ExportSettings(format=config.format)))
    return report
