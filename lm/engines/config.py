"""Where a model runs, as options (`EngineConfig`), and what a run on it cost (`EngineStats`).

The config reads nothing from the environment: `EngineConfig()` is the transformers engine
wherever it is made. The commands' options read `PREFLAB_ENGINE` and `OPENAI_BASE_URL`
(each field's `envvar`), as every other default is read. The server's key is read from
`OPENAI_API_KEY` when a client is made, and from nowhere else: it is no field here, so it
is never an option, never printed with the config, and never stored with a run's configuration.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from preflab.errors import ConfigError

ENGINES = ("transformers", "openai")
# The official client's own default: a hosted API when no URL is given anywhere.
HOSTED = "https://api.openai.com/v1"


@dataclass
class EngineConfig:
    """Where generating and judging call their model: in this process, or on OpenAI-compatible servers."""

    engine: str = field(
        default="transformers",
        metadata={
            "help": "transformers: load the model in this process; openai: ask an OpenAI-compatible server "
            "(vLLM, SGLang, TGI, llama.cpp, Ollama, a hosted API). Default: PREFLAB_ENGINE, else transformers.",
            "choices": ENGINES,
            "envvar": "PREFLAB_ENGINE",
        },
    )
    api_base: str | None = field(
        default=None,
        metadata={
            "help": "openai: the server's URL; several, comma-separated, share the requests (each goes to the one "
            "with the fewest in flight). Default: OPENAI_BASE_URL. The key is read from OPENAI_API_KEY only.",
            "envvar": "OPENAI_BASE_URL",
        },
    )
    model: str | None = field(
        default=None, metadata={"help": "openai: the served model's name (as the server's /v1/models lists it)."}
    )
    concurrency: int = field(default=32, metadata={"help": "openai: requests in flight at once, all servers together."})
    timeout: float = field(default=600.0, metadata={"help": "openai: seconds to wait for one answer before retrying."})
    max_retries: int = field(
        default=5,
        metadata={
            "help": "openai: retries of a request that met a 429, a 5xx, a timeout or a dropped connection "
            "(exponential backoff with jitter, honouring Retry-After)."
        },
    )
    price_in: float = field(default=0.0, metadata={"help": "openai: price per million prompt tokens (for the cost)."})
    price_out: float = field(default=0.0, metadata={"help": "openai: price per million generated tokens."})
    currency: str = field(
        default="USD",
        metadata={"help": "openai: the currency --price-in and --price-out are given in (said with every cost)."},
    )

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ConfigError(f"--engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if self.engine == "openai" and not self.api_base:
            self.api_base = HOSTED
        if self.concurrency < 1:
            raise ConfigError(f"--concurrency must be at least 1, got {self.concurrency}")
        if self.timeout <= 0:
            raise ConfigError(f"--timeout must be positive, got {self.timeout}")
        if self.max_retries < 0:
            raise ConfigError(f"--max-retries cannot be negative, got {self.max_retries}")
        if self.price_in < 0 or self.price_out < 0:
            raise ConfigError("--price-in and --price-out cannot be negative")
        if not (self.currency.isalpha() and 1 <= len(self.currency) <= 10):
            raise ConfigError(f"--currency names a currency in letters (USD, EUR, credits), got {self.currency!r}")
        if self.engine == "openai":
            if not self.model:
                raise ConfigError("--engine openai needs --model: the served model's name")
            self.urls()  # refuse a malformed URL now, before anything is asked

    def urls(self) -> list[str]:
        """The servers' base URLs, each ending in its API's root (`/v1` when a bare host is given)."""
        out = []
        for url in (u.strip() for u in (self.api_base or "").split(",")):
            if not url:
                continue
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigError(f"--api-base {url!r} is not an http(s) URL (e.g. http://127.0.0.1:8000/v1)")
            out.append(url.rstrip("/") + ("/v1" if parts.path.strip("/") == "" else ""))
        if not out:
            raise ConfigError("--api-base names no URL")
        return out

    def identity(self) -> dict[str, str | None]:
        """What names the judge or generator: the engine and the model (never a URL or the key).

        The same served model behind another URL (another machine) answers the same, so
        the URL is no part of what a run is.
        """
        return {"engine": self.engine, "model": self.model}

    def for_model(self, model: str, api_base: str | None = None, engine: str | None = None) -> EngineConfig:
        """This config for another model (a panel's member): on the server at `api_base` where one is given (a URL
        means a server), else on `engine` or this config's own, at this config's servers (`--api-base`, or
        OPENAI_BASE_URL as the options read it)."""
        kind = engine or ("openai" if api_base else self.engine)
        return replace(self, engine=kind, model=model, api_base=api_base or self.api_base)

    @property
    def served_model(self) -> str | None:
        """The name a server answers the model under (`model`); None in this process, where a job's own
        `--model` names what to load."""
        return self.model if self.engine == "openai" else None

    def where(self) -> str:
        """Where the model runs, for a person: " at URL" on a server, "" in this process."""
        return f" at {self.api_base}" if self.engine == "openai" else ""

    def shown(self) -> dict[str, Any]:
        """Where the model runs, for /health: the engine, and on a server the served model and its URL."""
        served = {"served_model": self.model, "api_base": self.api_base} if self.engine == "openai" else {}
        return {"engine": self.engine, **served}


@dataclass
class EngineStats:
    """What a run asked of its engine and what it cost."""

    engine: str
    model: str
    requests: int = 0  # requests answered by a server (or run in process)
    cache_hits: int = 0  # asks answered from the store: asked before, not paid again
    tokens_in: int = 0  # prompt tokens of the requests sent
    tokens_out: int = 0  # generated tokens of the requests sent
    retries: int = 0  # requests sent again after a 429, 5xx, timeout, dropped connection or unreadable answer
    errors: int = 0  # asks left without an answer after every retry (asked again by the next run)
    quarantined: int = 0  # asks the server refused for the item itself (over the context length)
    seconds: float = 0.0  # wall time inside the engine's calls
    price_in: float = 0.0  # per million tokens
    price_out: float = 0.0
    servers_lost: list[str] = field(default_factory=list)  # servers that stopped answering while others went on

    @property
    def cost(self) -> float:
        return (self.tokens_in * self.price_in + self.tokens_out * self.price_out) / 1e6

    def as_dict(self) -> dict:
        out = asdict(self)
        out["cost"] = round(self.cost, 6)
        out["requests_per_s"] = round(self.requests / self.seconds, 3) if self.seconds else None
        return out


def asked_a_server(stats: dict[str, Any] | None) -> bool:
    """Whether `EngineStats.as_dict()` stats are a server's that were asked something (or read back from the
    store): what a summary line reports. In process nothing is paid for, retried or read back."""
    return bool(
        stats
        and stats["engine"] != "transformers"
        and (stats["requests"] or stats["cache_hits"] or stats["errors"] or stats["quarantined"])
    )
