"""The retrain job's config (`preflab.training.retrain.job`): read from a file, checked, every mistake one sentence.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from preflab.errors import ConfigError
from preflab.settings import data_dir
from preflab.training.methods import METHODS

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
