"""Small builders shared by the database tests."""

import json
from pathlib import Path


def ranking_line(prompt, responses, ranking, annotator="alice", kind="human", id=None, **extra):
    record = {
        "prompt": prompt,
        "responses": responses,
        "ranking": ranking,
        "annotator": annotator,
        "annotator_kind": kind,
        **extra,
    }
    if id is not None:
        record["id"] = id
    return json.dumps(record)


def write_lines(path: Path, lines) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
