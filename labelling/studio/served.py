"""The judge the ML backend serves, and its name as `model_version` (`backend.py` serves it).

- `judge=None` (or `"reward-model"` with no `model`): the reward-model judge on the current reward
  model version (the one `preflab retrain` made current; without one, the newest reward version).
  Retraining changes it, and so `model_version`. Without any reward model, and with a `default`
  model (the server's: the global `--model`, the embedded SmolLM2 unless PREFLAB_MODEL says
  otherwise), the likelihood judge on that model, as `preflab judge likelihood` runs it, so a
  fresh project gets predictions before anything is trained; without a `default` the name is
  `NO_MODEL` and every task gets `[]`.
- a kind of judge (`preflab.labelling.judges.table.JUDGES`) with `model=` (else `default`) and that
  kind's config fields: that judge configuration, exactly as `preflab judge KIND` would run it
  (`model=` alone: the reward-model judge on that model).
- an AI annotator's name (`judge:KIND:RUN:MODEL`, as `ls predict --judge` and `judge report` show
  it): that judge, rebuilt from its stored configuration (refused if it no longer rebuilds to the
  same run). An AI annotator that is no judge run (imported AI rankings) only has its stored
  rankings served.

A kind of judge that reads a causal LM (and the default likelihood judge) runs on its engine
(`preflab.lm.engines`): in this process by default; with `engine` on a server (`--engine openai`), there,
nothing loaded here, its annotator the one `preflab judge KIND --engine openai --model NAME` ranks as
(`judge:KIND:RUN:openai:NAME`). A reward model is always scored in process.

`model_version` is the judge's annotator name (the name `ls predict` uploads under, so Label Studio
does not ask again for what `ls predict` sent), or the model version's name when the judge's model
is a trained model version (a reward model, a pair ranker).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from preflab.db.models import Annotator, AnnotatorKind, ModelVersion
from preflab.errors import ConfigError, NotFound
from preflab.labelling.judges.base import JudgeRun
from preflab.labelling.judges.identity import STORED_NAMES, identity
from preflab.labelling.judges.table import JUDGES
from preflab.lm.engines import Engine, EngineConfig, engine_model, open_engine
from preflab.lm.names import NamedModel, resolve_model

NO_MODEL = "no-reward-model"  # model_version while no reward model exists to serve
REWARD_JUDGE = "reward-model"
DEFAULT_JUDGE = "likelihood"  # served on the default model while nothing is trained: no judge prompt to get wrong


@dataclass(frozen=True)
class ServedJudge:
    """The judge that predicts, resolved from the server's `--judge` (no model loaded)."""

    name: str  # its model_version
    annotator: str  # the AI annotator whose rankings it serves
    kind: str | None  # a key of JUDGES; None: it cannot rank (its stored rankings only)
    run: JudgeRun | None = None
    location: str | None = None  # where its model is: what to load here, or its name on the server
    config: Any = None
    default: bool = False  # the default model's likelihood judge: no reward model, no --judge
    engine: EngineConfig | None = None  # where a judge that reads a causal LM runs; None: a scorer, here

    @property
    def model(self) -> str | None:
        """The judge model's label (embedded name, hub id, path or model version)."""
        return self.run.model if self.run is not None else None

    def open(self, sessions=None, cache=None) -> Engine:
        """The engine of a judge that reads a causal LM, on its model (close it when done): in process loaded through
        `cache` on first use, on a server asked under its served name (its answers kept in `sessions`' store)."""
        model = NamedModel(self.model, self.location, None, None, None)
        return open_engine(
            self.engine, sessions, model=model, cache=cache, batch_size=self.config.batch_size, record=False
        )

    def describe(self) -> str:
        """One phrase for the start-up line and /health: which judge, on which model, and why."""
        if self.kind is None:
            return f"the stored rankings of {self.name} (it cannot rank anything new)"
        why = " (the default model: no reward model is trained yet)" if self.default else ""
        where = self.engine.where() if self.engine is not None else ""
        return f"the {self.kind} judge on {self.model}{where}{why}"


def _build_config(kind: str, values: dict[str, Any]):
    try:
        return JUDGES[kind].config(**values)
    except TypeError as exc:
        raise ConfigError(f"judge {kind!r} has no such option: {exc}") from None


def _reward_version(session: Session) -> ModelVersion | None:
    """The current reward model version; with none marked current, the newest one (a saved one either way)."""
    return session.scalars(
        select(ModelVersion)
        .where(ModelVersion.kind == "reward", ModelVersion.path.is_not(None))
        .order_by(ModelVersion.is_current.desc(), ModelVersion.id.desc())
        .limit(1)
    ).first()


def _served(kind: str, label: str, location: str, version_id: int | None, config) -> ServedJudge:
    run = JudgeRun(kind, label, identity(kind, config))
    name = label if version_id is not None and JUDGES[kind].scorer else run.annotator_name
    return ServedJudge(name, run.annotator_name, kind, run, location, config)


def _on_engine(session: Session, kind: str, engine: EngineConfig | None, model: str | None, config) -> ServedJudge:
    """The judge of `kind` (one that reads a causal LM) on `model` and its engine, as `preflab judge KIND` runs it
    (on a server, the served model the engine names)."""
    engine = engine or EngineConfig()
    if model is None and engine.served_model is None:
        raise ConfigError(f"the {kind} judge needs a model: give its name or path")
    label, location, version_id = engine_model(session, engine, model, record=False)
    return dataclasses.replace(_served(kind, label, location, version_id, config), engine=engine)


def _rebuilt(session: Session, row: Annotator, options: dict[str, Any]) -> ServedJudge:
    """The judge run behind an AI annotator, from its stored configuration (and speed-only `options`)."""
    if row.judge_kind not in JUDGES or not row.model or not isinstance(row.config, dict):
        return ServedJudge(row.name, row.name, None)
    kind = row.judge_kind
    names = {f.name for f in dataclasses.fields(JUDGES[kind].config)}
    stored = {({v: k for k, v in STORED_NAMES.items()}).get(k, k): v for k, v in row.config.items()}
    config = _build_config(kind, {**{k: v for k, v in stored.items() if k in names}, **options})
    label, location, version_id = resolve_model(session, row.model, record=False)
    served = _served(kind, label, location, version_id, config)
    if not JUDGES[kind].scorer:  # rebuilt in this process, as the judge it names
        served = dataclasses.replace(served, engine=EngineConfig())
    if served.run.run_id != row.config.get("run_id"):
        raise ConfigError(
            f"judge {row.name!r} no longer rebuilds to the same run (its prompt, model or "
            "options changed since it ran): name its kind and model instead"
        )
    return served


def served_judge(
    session: Session,
    judge: str | None = None,
    *,
    model: str | None = None,
    default: str | None = None,
    engine=None,
    **config,
) -> ServedJudge | None:
    """The judge `judge` names (see the module docstring); None when nothing can be served.

    Args:
        judge: None (the current reward model), a kind of judge, or an AI annotator's name.
        model: the judge's model (a model version, embedded name, path or hub id).
        default: the model of the likelihood judge served while no reward model exists, and of a
            kind of judge named without `model`.
        engine: the `EngineConfig` of `--engine`: where the judges that read a causal LM run (default: in this
            process); on a server, on its served model (`engine.model`).
        config: fields of the judge kind's config dataclass.
    """
    if judge is None and model is not None:
        judge = REWARD_JUDGE  # a model alone is a reward model to score with
    if judge is None or (judge == REWARD_JUDGE and model is None):
        version = _reward_version(session)
        if version is not None:
            return _served(REWARD_JUDGE, version.name, version.path, version.id, _build_config(REWARD_JUDGE, config))
        if judge is not None or (default is None and (engine is None or engine.served_model is None)):
            return None  # `--judge reward-model` asked for one; or no model to judge with
        served = _on_engine(session, DEFAULT_JUDGE, engine, default, _build_config(DEFAULT_JUDGE, config))
        return dataclasses.replace(served, default=True)
    if judge in JUDGES and not JUDGES[judge].scorer:
        return _on_engine(session, judge, engine, model or default, _build_config(judge, config))
    if judge in JUDGES:
        model = model or default
        if model is None:
            raise ConfigError(f"the {judge} judge needs a model: give its name or path")
        label, location, version_id = resolve_model(session, model, record=False)
        return _served(judge, label, location, version_id, _build_config(judge, config))
    row = session.scalar(select(Annotator).where(Annotator.kind == AnnotatorKind.ai.value, Annotator.name == judge))
    if row is None:
        raise NotFound(
            f"no judge {judge!r}: name a kind of judge ({', '.join(JUDGES)}) or an AI annotator "
            "(`preflab judge report` lists them)"
        )
    return _rebuilt(session, row, config)


def model_version(session: Session, judge: str | None = None, **judge_options) -> str:
    """What /setup answers: the served judge's name (see the module docstring). Cheap: no model is loaded."""
    served = served_judge(session, judge, **judge_options)
    return NO_MODEL if served is None else served.name
