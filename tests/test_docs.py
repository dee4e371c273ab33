"""docs/architecture.md matches the tree: its drawing of the floors names every module there is.

A newcomer reads the drawing to find where a concern lives, so a module added
without a place in it fails here, as does a folder the drawing names that is gone.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The floors the drawing lists module by module; db's stages are listed inside db's line.
FLOORS = ["preflab/commands", "report", "training", "labelling", "lm", "db", "db/ingest", "db/pairs",
          "db/quality", "db/export", "db/leaderboard"]


def drawing() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    return text.split("```", 2)[1]


def test_the_drawing_names_every_module_of_every_floor():
    words = set(re.findall(r"[a-z_]+", drawing()))
    missing = []
    for floor in FLOORS:
        for path in sorted((ROOT / floor).iterdir()):
            name = path.stem if path.suffix == ".py" else path.name
            if path.name.startswith(("_", ".")) or (path.is_file() and path.suffix != ".py"):
                continue
            if path.is_dir() and not (path / "__init__.py").exists():
                continue
            if name not in words:
                missing.append(f"{floor}/{path.name}")
    assert not missing, f"docs/architecture.md does not place: {missing}"


def test_every_folder_the_drawing_names_exists():
    for folder in re.findall(r"(?<![\w/])([a-z_]+(?:/[a-z_]+)*)/", drawing()):
        candidates = [ROOT / folder, *(ROOT / floor / folder for floor in FLOORS)]
        assert any(c.is_dir() for c in candidates), folder
