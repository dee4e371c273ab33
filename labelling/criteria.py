"""Criteria of your own: a TOML file of `[name]` tables, each with the `description` annotators and judges see.

    [concision]
    description = "Concision: the response says what is needed in the fewest words, leaving nothing out."

Read by `ls init --criteria-file` (the descriptions beside each criterion's ranker) and by the judges'
`--criteria-file` (their rubrics); the built-in ones are `preflab.templates.criteria.DESCRIPTIONS`.
"""

from __future__ import annotations

from pathlib import Path

import tomllib

from preflab.db.ingest.records import criterion_name
from preflab.errors import InputError, Invalid


def read_criteria_file(path: str | Path) -> dict[str, str]:
    """Criterion name -> description from a TOML file of `[name]` tables, each with `description = "…"`."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"cannot read the criteria file {path}: {exc}") from exc
    out = {}
    for name, table in data.items():
        try:
            criterion_name(name, f"criterion {name!r} in {path}")
        except Invalid as exc:
            raise InputError(str(exc)) from exc
        text = table.get("description") if isinstance(table, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise InputError(f'criterion {name!r} in {path} needs a description = "…"')
        out[name] = text.strip()
    return out
