"""Settings: what the root `preflab` options resolved, and the defaults.

The order option, then environment variable, then default lives in click (the root
group's options in `preflab.cli`); `Settings()` alone holds the defaults, for library
code that has no command line. Secrets (`LABEL_STUDIO_API_KEY`, `HF_TOKEN`) are read
from the environment only, at the moment they are needed (`secret`), and never stored
on this object's repr, logged or written to the database.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_MODEL = "smollm2-135m-instruct"


def data_dir() -> Path:
    """The directory holding preflab's state: `PREFLAB_HOME`, else the user data dir."""
    home = os.environ.get("PREFLAB_HOME")
    if home:
        return Path(home).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("preflab", appauthor=False))


def model_cache_dir() -> Path:
    """Where converted models live: `PREFLAB_MODEL_CACHE`, else the user cache dir's `models`.

    That is `~/.cache/preflab/models` on Linux, whatever `PREFLAB_HOME` says: one
    conversion (517 MB for the embedded SmolLM2) serves every store on the machine,
    however preflab is started.
    """
    cache = os.environ.get("PREFLAB_MODEL_CACHE", "").strip()
    if cache:
        return Path(cache).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("preflab", appauthor=False)) / "models"


def default_database_url() -> str:
    return f"sqlite:///{data_dir() / 'preflab.db'}"


def secret(name: str) -> str | None:
    """Read a secret from the environment; empty counts as unset."""
    value = os.environ.get(name, "").strip()
    return value or None


@dataclass
class Settings:
    database_url: str = field(default_factory=default_database_url)
    label_studio_url: str | None = None
    model: str = DEFAULT_MODEL

    def redacted_url(self) -> str:
        """The database URL with any password hidden, for messages."""
        from sqlalchemy.engine import make_url

        return make_url(self.database_url).render_as_string(hide_password=True)
