"""What `preflab serve` is told: the `ServeConfig` its options are made from, and the checks made before binding."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from dataclasses import dataclass, field
from typing import Any

from preflab.errors import ConfigError
from preflab.labelling.studio.connect import SECRET_ENV, SECRET_HEADER  # one definition, shared with ls connect
from preflab.settings import secret

__all__ = [
    "SECRET_ENV",
    "SECRET_HEADER",
    "ServeConfig",
    "check_bind",
    "is_loopback",
    "parse_duration",
    "webhook_secret",
]
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, what: str) -> float | None:
    """Seconds in `90`, `30s`, `10m`, `2h` or `1d`; None for `0` or `off` (never)."""
    value = text.strip().lower()
    if value in ("0", "off", "never", ""):
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhd]?)", value)
    if not match:
        raise ConfigError(f"{what} must be a duration such as 30s, 10m, 2h or 1d (or off), got {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def is_loopback(host: str) -> bool:
    """Whether a bind address is reachable from this machine only (a name other than localhost is not trusted)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass
class ServeConfig:
    """How `preflab serve` listens, whom it asks for rankings, and what it does in the background."""

    host: str = field(
        default="127.0.0.1",
        metadata={"help": f"Address to bind. Any address other than loopback needs {SECRET_ENV} set."},
    )
    port: int = field(default=9090, metadata={"help": "Port to listen on."})
    judge: str | None = field(
        default=None,
        metadata={
            "help": "The AI judge that ranks tasks /predict has no stored ranking for (its annotator name); "
            "its name, or the current reward model version's, is the model_version Label Studio sees."
        },
    )
    judge_model: str | None = field(
        default=None,
        metadata={
            "help": "The judge's model, when --judge names a kind of judge: a model version, embedded name, path "
            "or hub id."
        },
    )
    predict_budget: str = field(
        default="20s",
        metadata={
            "help": "Answer /predict within this long: Label Studio waits ML_TIMEOUT_PREDICT (100 s) and then stores "
            "nothing. Tasks whose ranking is not stored by then get none and are ranked in the background for "
            "the next retrieve (off: rank them all first, however long it takes)."
        },
    )
    workers: int = field(
        default=1, metadata={"help": "Server processes. Each parses deliveries; the database keeps their work single."}
    )
    sync_every: str = field(
        default="10m",
        metadata={
            "help": "Run the incremental `ls sync` this often in the background (30s, 10m, 2h; off: only at start)."
        },
    )
    retrain_every: int | None = field(
        default=None,
        metadata={
            "help": "Start `preflab retrain` (in the background, with its lock) once this many new human rankings "
            "arrived since the last retrain; this count replaces the config's min_new (default: never)."
        },
    )
    retrain_config: str | None = field(
        default=None,
        metadata={
            "help": "The retrain config for --retrain-every (default: PREFLAB_RETRAIN_CONFIG, else "
            "DATA_DIR/retrain.toml)."
        },
    )
    max_body_mb: float = field(
        default=10.0,
        metadata={"help": "Largest request body accepted, in MB; a larger one gets 413 and is not stored."},
    )
    # Where the judge runs (`preflab.lm.engines.EngineConfig`, from the engine options `serve` adds): not an option
    # of its own. On a server (openai) a judge that reads a causal LM ranks there; None: in this process.
    engine: Any = None

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ConfigError(f"--port must be between 1 and 65535, got {self.port}")
        if self.workers < 1:
            raise ConfigError(f"--workers must be at least 1, got {self.workers}")
        if self.retrain_every is not None and self.retrain_every < 1:
            raise ConfigError(f"--retrain-every must be at least 1, got {self.retrain_every}")
        if self.max_body_mb <= 0:
            raise ConfigError(f"--max-body-mb must be positive, got {self.max_body_mb}")
        self.sync_seconds = parse_duration(self.sync_every, "--sync-every")  # checked now, before binding
        self.predict_seconds = parse_duration(self.predict_budget, "--predict-budget")
        if isinstance(self.engine, dict):  # as `as_dict` gave it to a --workers process
            from preflab.lm.engines.config import EngineConfig

            self.engine = EngineConfig(**self.engine)

    @property
    def max_body(self) -> int:
        return int(self.max_body_mb * 1_000_000)

    def retrain_config_path(self) -> str | None:
        """The retrain config file, when retraining on arrival is on (read and checked before binding)."""
        if self.retrain_every is None:
            return None
        from preflab.training.retrain.config import find_retrain_config

        return str(find_retrain_config(self.retrain_config or os.environ.get("PREFLAB_RETRAIN_CONFIG")))

    def judge_options(self) -> dict:
        """What `backend.model_version` and `predict_tasks` take beside the judge's name."""
        options = {"model": self.judge_model} if self.judge_model else {}
        return options | ({"engine": self.engine} if self.engine is not None else {})

    def as_dict(self) -> dict:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        if self.engine is not None:
            out["engine"] = dataclasses.asdict(self.engine)  # its fields only: the key is never one of them
        return out


def webhook_secret() -> str | None:
    """The shared secret, from the environment only (never an option: `ps` would show it)."""
    return secret(SECRET_ENV)


def check_bind(host: str, shared_secret: str | None) -> None:
    """Refuse to listen beyond this machine with no secret: anyone could then write to the store."""
    if shared_secret is None and not is_loopback(host):
        raise ConfigError(f"refusing to listen on {host} without a secret: set {SECRET_ENV} (or bind 127.0.0.1)")
