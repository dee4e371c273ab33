"""`preflab retrain`: the job a scheduler runs.

Under a lease in the database (so two overlapping runs, on one machine or many,
never both train): count the comparisons that the rankings made since the last
successful retrain would yield; with at least `min_new` of them, rebuild the
pairs, export a dataset version and train what the config file asks for (a
reward model and/or a DPO policy). A model version that trains successfully
becomes the current one of its kind; a run that fails leaves the previous one
current. With too few new comparisons the job says so and changes nothing.

The config file (TOML, or JSON with the same keys):

    min_new = 100                      # new comparisons needed to retrain
    model = "smollm2-135m-instruct"    # starting model (default: the global --model)
    start_from = "base"                # or "current": continue from the current model version
    lock_ttl = 600                     # seconds a crashed run's lease outlives it

    [pairs]                            # as `preflab pairs build`
    strategy = "all"
    aggregate = "none"
    annotator_kind = "any"

    [export]                           # as `preflab export` (conversational, the form training reads)
    test_size = 0.1
    prompt = "explicit"

    [reward]                           # train a reward model: fields of `preflab train reward`
    grouped = true
    num_train_epochs = 1

    [dpo]                              # train a DPO policy: fields of `preflab train dpo` (+ model)
    beta = 0.1
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from preflab.console import SILENT, Reporter
from preflab.db.models import Annotator, DatasetVersion, ModelVersion, Ranking, RankingStatus, TrainingRun
from preflab.errors import ConfigError, LockHeld, TrainingError
from preflab.files import shared_mkdtemp
from preflab.settings import data_dir
from preflab.training.methods import METHODS, train

LOCK = "retrain"
# The methods a retrain config may train, each in a section of its own name ([reward], [dpo]), in this order.
SECTIONS = {name: method for name, method in METHODS.items() if method.retrain}
TOP_LEVEL = {"min_new", "model", "start_from", "lock_ttl", "output_dir", "report", "pairs", "export", *SECTIONS}
PAIRS_KEYS = {"strategy", "aggregate", "annotator_kind"}


@dataclass
class RetrainConfig:
    """What `preflab retrain` trains, read from a TOML or JSON file."""

    min_new: int = 100
    model: str | None = None
    start_from: str = "base"
    lock_ttl: float = 600.0
    output_dir: str | None = None
    report: str | None = None  # write `preflab report` here after every run
    pairs: dict[str, str] = field(
        default_factory=lambda: {"strategy": "all", "aggregate": "none", "annotator_kind": "any"}
    )
    export: Any = None  # preflab.db.export.dataset.ExportSettings
    trains: dict[str, Any] = field(default_factory=dict)  # method → its config, for each section given
    models: dict[str, str | None] = field(default_factory=dict)  # per-method starting model

    def __post_init__(self) -> None:
        if self.min_new < 0:
            raise ConfigError(f"min_new cannot be negative, got {self.min_new}")
        if self.start_from not in ("base", "current"):
            raise ConfigError(f"start_from must be 'base' or 'current', got {self.start_from!r}")
        if self.lock_ttl <= 0:
            raise ConfigError(f"lock_ttl must be a positive number of seconds, got {self.lock_ttl}")
        if self.report is not None and (not isinstance(self.report, str) or not self.report.strip()):
            raise ConfigError(f"report must be the path of an HTML file, got {self.report!r}")
        if not self.trains:
            tables = " and/or ".join(f"a [{name}]" for name in SECTIONS)
            raise ConfigError(f"the retrain config trains nothing: add {tables} table")
        if self.export is None:
            from preflab.db.export.dataset import ExportSettings

            self.export = ExportSettings()

    def kinds(self) -> list[str]:
        """The methods to train, in the table's order (a reward model before the policies)."""
        return [name for name in SECTIONS if name in self.trains]


def _table(data: dict, name: str, allowed: set[str] | None, where: str) -> dict:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {name} must be a table of settings")
    if allowed is not None:
        unknown = sorted(set(value) - allowed)
        if unknown:
            raise ConfigError(
                f"{where}: unknown key {unknown[0]!r} in [{name}] (expected one of {', '.join(sorted(allowed))})"
            )
    return value


def parse_retrain_config(data: dict, where: str = "the retrain config") -> RetrainConfig:
    """Check and build the config from a parsed file; every mistake is one sentence naming the key."""
    from preflab.db.export.dataset import ExportSettings

    unknown = sorted(set(data) - TOP_LEVEL)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (expected one of {', '.join(sorted(TOP_LEVEL))})")
    pairs = {
        "strategy": "all",
        "aggregate": "none",
        "annotator_kind": "any",
        **_table(data, "pairs", PAIRS_KEYS, where),
    }
    export_keys = {f.name for f in dataclasses.fields(ExportSettings)}
    try:
        export = ExportSettings(**_table(data, "export", export_keys, where))
    except ConfigError as exc:
        raise ConfigError(f"{where}: [export] {exc}") from None
    trains, models = {}, {}
    for kind, method in SECTIONS.items():
        if kind not in data:
            continue
        section = dict(_table(data, kind, {f.name for f in dataclasses.fields(method.config)} | {"model"}, where))
        models[kind] = section.pop("model", None)
        try:
            trains[kind] = method.config(**section)
        except (ConfigError, TypeError) as exc:
            raise ConfigError(f"{where}: [{kind}] {exc}") from None
    scalars = {k: data[k] for k in ("min_new", "model", "start_from", "lock_ttl", "output_dir", "report") if k in data}
    return RetrainConfig(pairs=pairs, export=export, trains=trains, models=models, **scalars)


def _toml():
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise ConfigError(
                "reading a TOML config needs Python 3.11 or the tomli package; or write the config as JSON"
            ) from None
    return tomllib


def find_retrain_config(path: str | Path | None = None) -> Path:
    """The retrain config file: `path`, else DATA_DIR/retrain.toml."""
    if path:
        return Path(path)
    default = data_dir() / "retrain.toml"
    if not default.is_file():
        raise ConfigError(f"no retrain config: pass --config FILE or write {default}")
    return default


MAX_CONFIG_BYTES = 1 << 20  # a config is a page of settings: anything this large is some other file


def _config_text(path: Path) -> str:
    """The text of a config file, by the rules every preflab reader follows (`preflab.db.ingest.lines`)."""
    from preflab.db.ingest.lines import open_input

    with open_input(path) as handle:  # gzip read through; UTF-16, zip and the like refused
        data = handle.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path} is over {MAX_CONFIG_BYTES:,} bytes: not a retrain config")
    try:
        return data.decode("utf-8-sig")  # a byte-order mark is not part of the config
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def _check_values(data: dict, where: str) -> None:
    """Refuse what no setting can be: NaN or infinity (TOML allows them), and text holding a NUL."""
    stack: list[tuple[str, Any]] = [(str(k), v) for k, v in data.items()]
    while stack:
        key, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{where}: {key} is {value}, not a finite number")
        if isinstance(value, str) and "\x00" in value:
            raise ConfigError(f"{where}: {key} holds a NUL character")
        if isinstance(value, dict):
            stack.extend((f"{key}.{k}", v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{key}[{i}]", v) for i, v in enumerate(value))


def load_retrain_config(path: str | Path) -> RetrainConfig:
    """Read a TOML (or, by its suffix, JSON) retrain config file."""
    from preflab.db.ingest.records import load_object
    from preflab.errors import Invalid

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"the retrain config {path} does not exist")
    text = _config_text(path)
    if path.suffix.lower() == ".json":
        try:
            data = load_object(text)  # NaN, Infinity and deep nesting refused with the reason
        except Invalid as exc:
            raise ConfigError(f"{path} is {exc}" if str(exc).startswith("not ") else f"{path}: {exc}") from None
    else:
        try:
            data = _toml().loads(text)
        except ValueError as exc:  # tomllib.TOMLDecodeError is a ValueError
            raise ConfigError(f"{path} is not valid TOML: {exc}") from None
        except RecursionError:
            raise ConfigError(f"{path} is not valid TOML: nested too deeply") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a table of settings")
    _check_values(data, str(path))
    return parse_retrain_config(data, str(path))


@dataclass
class RetrainResult:
    status: str  # trained | nothing-to-do | locked
    message: str
    new_comparisons: int = 0
    min_new: int = 0
    since: str | None = None  # the dataset version the count starts after
    dataset_version: str | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def last_trained_dataset(session: Session) -> DatasetVersion | None:
    """The dataset version of the newest retrain whose every training succeeded."""
    for version in session.scalars(select(DatasetVersion).order_by(DatasetVersion.id.desc())):
        settings = version.settings or {}
        if settings.get("job") == "retrain" and settings.get("trained"):
            return version
    return None


def count_new_pairs(session: Session, since: datetime | None, pairs: dict[str, str]) -> int:
    """Strict pairs (by the configured strategy) of the valid rankings made after `since`.

    Counted per ranking, before any aggregation across annotators.
    """
    from preflab.db.pairs.build import expand_tiers
    from preflab.training.selfreward.data import rankings_by_id

    query = (
        select(Ranking.id)
        .join(Annotator, Annotator.id == Ranking.annotator_id)
        .where(Ranking.status == RankingStatus.valid.value)
    )
    if pairs["annotator_kind"] != "any":
        query = query.where(Annotator.kind == pairs["annotator_kind"])
    if since is not None:
        query = query.where(Ranking.created_at > since)
    return sum(
        sum(1 for _ in expand_tiers(tiers, pairs["strategy"]))
        for _, _, _, tiers, _ in rankings_by_id(session, query).values()
    )


def current_version(session: Session, kind: str) -> ModelVersion | None:
    return session.scalars(
        select(ModelVersion)
        .where(ModelVersion.kind == kind, ModelVersion.is_current.is_(True))
        .order_by(ModelVersion.id.desc())
    ).first()


def make_current(session: Session, version_id: int) -> None:
    """Make this model version the current one of its kind (and no other)."""
    version = session.get(ModelVersion, version_id)
    session.execute(
        update(ModelVersion)
        .where(ModelVersion.kind == version.kind, ModelVersion.id != version.id, ModelVersion.is_current.is_(True))
        .values(is_current=False)
    )
    version.is_current = True


def retrain(
    sessions: sessionmaker[Session],
    config: RetrainConfig,
    default_model: str,
    min_new: int | None = None,
    reporter: Reporter = SILENT,
    after_run: Callable[[sessionmaker[Session]], None] | None = None,
) -> RetrainResult:
    """Run the retrain job once; see the module docstring.

    Args:
        min_new: new comparisons needed to retrain; default the config's `min_new`.
        reporter: notes each stage, and shows the training progress bars.
        after_run: called while the lock is still held, after every run that held it (trained,
            nothing to do, or failed), e.g. to write the report page.

    Raises:
        TrainingError: a configured training failed (the previous model version stays current).
    """
    from preflab.db.locks import hold

    min_new = config.min_new if min_new is None else min_new
    try:
        with hold(sessions, LOCK, config.lock_ttl) as lease:
            reporter.note(f"holding the {LOCK} lock as {lease.holder}")
            try:
                return _retrain(sessions, config, default_model, min_new, reporter)
            finally:
                if after_run is not None:
                    after_run(sessions)
    except LockHeld as exc:
        return RetrainResult("locked", f"skipped: {exc}", min_new=min_new)


def _retrain(
    sessions: sessionmaker[Session], config: RetrainConfig, default_model: str, min_new: int, reporter: Reporter
) -> RetrainResult:
    from preflab.db.export.job import export_dataset
    from preflab.db.locks import db_now
    from preflab.db.pairs.build import build_pairs

    with sessions.begin() as session:
        baseline = last_trained_dataset(session)
        since = datetime.fromisoformat(baseline.settings["rankings_until"]) if baseline else None
        cutoff = db_now(session)  # rankings made from here on count towards the next run
        new = count_new_pairs(session, since, config.pairs)
    since_name = baseline.name if baseline else None
    if new < min_new:
        where = f"since dataset version {since_name}" if since_name else "in the store"
        return RetrainResult(
            "nothing-to-do",
            f"nothing to do: {new:,} new comparisons {where} (at least {min_new:,} needed)",
            new,
            min_new,
            since_name,
        )
    root = Path(config.output_dir) if config.output_dir else data_dir() / "retrain"
    root.mkdir(parents=True, exist_ok=True)
    folder = shared_mkdtemp(f"{cutoff:%Y%m%dT%H%M%S}-", root)  # the runs and dataset in it are read by others
    with sessions.begin() as session:
        build = build_pairs(session, **config.pairs)
    with sessions.begin() as session:
        version = export_dataset(session, folder / "dataset", config.export)
        version.settings = {
            **version.settings,
            "job": "retrain",
            "rankings_until": cutoff.isoformat(),
            "trained": False,
        }
        dataset = version.name
    reporter.note(f"{new:,} new comparisons: rebuilt {build.pairs:,} pairs, exported dataset version {dataset}")
    runs = [_train_one(sessions, config, kind, default_model, dataset, folder, reporter) for kind in config.kinds()]
    failed = [r for r in runs if r["status"] == "failed"]
    if failed:
        kept = "; ".join(
            f"{r['kind']} run {r['run_id']} failed ({r['error']}), {r['current'] or 'no model'} stays current"
            for r in failed
        )
        raise TrainingError(f"retrain on {dataset}: {kept}")
    with sessions.begin() as session:
        row = session.get(DatasetVersion, version.id)
        row.settings = {**row.settings, "trained": True}
    names = ", ".join(f"{r['model_version']} ({r['kind']})" for r in runs)
    return RetrainResult(
        "trained", f"trained {names} on {dataset} ({new:,} new comparisons)", new, min_new, since_name, dataset, runs
    )


def _train_one(
    sessions: sessionmaker[Session],
    config: RetrainConfig,
    kind: str,
    default_model: str,
    dataset: str,
    folder: Path,
    reporter: Reporter,
) -> dict[str, Any]:
    from preflab.training.faults import trainer_callback

    model_kind = SECTIONS[kind].model_kind
    with sessions.begin() as session:
        current = current_version(session, model_kind)
        current_name = current.name if current else None
        last_run = session.scalar(select(func.max(TrainingRun.id))) or 0
    start = config.models.get(kind) or config.model or default_model
    if config.start_from == "current" and current is not None and current.path:
        start = current_name
    reporter.note(f"training {kind} from {start}")
    try:
        result = train(
            kind,
            sessions,
            config.trains[kind],
            start,
            dataset,
            output_dir=str(folder / kind),
            callbacks=[trainer_callback("retrain")],
            reporter=reporter,
        )
    except Exception as exc:  # the run is recorded as failed; the other kind may still train
        run_id = _failed_run_after(sessions, last_run)
        reporter.note(f"{kind} training failed: {exc}")
        return {
            "kind": kind,
            "status": "failed",
            "run_id": run_id,
            "error": str(exc).splitlines()[0][:300],
            "model_version": None,
            "current": current_name,
            "metrics": None,
        }
    with sessions.begin() as session:
        make_current(session, result.model_version_id)
    reporter.note(f"{result.model_version} is now the current {model_kind} model")
    return {
        "kind": kind,
        "status": "succeeded",
        "run_id": result.run_id,
        "error": None,
        "model_version": result.model_version,
        "current": result.model_version,
        "metrics": result.metrics,
    }


def _failed_run_after(sessions: sessionmaker[Session], last_run: int) -> int | None:
    """The run this job recorded before it failed (None when it failed before recording one)."""
    with sessions.begin() as session:
        return session.scalar(
            select(TrainingRun.id)
            .where(TrainingRun.id > last_run, TrainingRun.status == "failed")
            .order_by(TrainingRun.id.desc())
            .limit(1)
        )
