"""The docs match the tree.

docs/project/architecture.md's drawing of the floors names every module there is: a newcomer reads
the drawing to find where a concern lives, so a module added without a place in it fails
here, as does a folder the drawing names that is gone.

The site (mkdocs.yml) builds with --strict, so a broken link, a missing page or anchor fails
the suite; every command has its reference entry, every table and environment variable its
line, and every page the nav names exists (as sqlite-utils checks its CLI reference).
"""

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
# The floors the drawing lists module by module; db's stages are listed inside db's line.
FLOORS = [
    "preflab/commands",
    "preflab/server",
    "report",
    "training",
    "labelling",
    "lm",
    "db",
    "db/ingest",
    "db/pairs",
    "db/quality",
    "db/export",
    "db/leaderboard",
]


def drawing() -> str:
    text = (ROOT / "docs" / "project" / "architecture.md").read_text(encoding="utf-8")
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
    assert not missing, f"docs/project/architecture.md does not place: {missing}"


def test_every_folder_the_drawing_names_exists():
    for folder in re.findall(r"(?<![\w/])([a-z_]+(?:/[a-z_]+)*)/", drawing()):
        candidates = [ROOT / folder, *(ROOT / floor / folder for floor in FLOORS)]
        assert any(c.is_dir() for c in candidates), folder


def test_the_folders_table_gives_every_package_folder_its_import_name():
    """The architecture page's Folders table: each folder exists, and each installed one under its name."""
    import tomllib

    text = (ROOT / "docs" / "project" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("\n## Folders\n", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `([\w/]+)/` \| `?([\w.—]+)`? \|", section, re.MULTILINE))
    for folder in rows:
        assert (ROOT / folder).is_dir(), f"the Folders table names {folder}/, which the tree does not have"
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-dir"
    ]
    installed = {folder: name for name, folder in package_dir.items()}
    installed |= {"preflab/commands": "preflab.commands", "preflab/server": "preflab.server"}
    assert {folder: rows.get(folder) for folder in installed} == installed
    assert {"tests", "bench", "docs"} <= rows.keys()


# --- the site (mkdocs.yml, docs/): it builds strictly, and it covers what the code has ----------------

SITE_DOCS = ROOT / "docs"


def reference_hook():
    """docs/hooks/reference.py, the hook that writes the generated pages (it walks the commands)."""
    spec = importlib.util.spec_from_file_location("preflab_docs_reference", SITE_DOCS / "hooks" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site as `mkdocs build --strict` writes it: a broken link, a missing page or anchor fails here."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return out


def nav_pages(entries) -> list[str]:
    pages = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_every_page_the_nav_names_exists_and_every_page_is_in_the_nav(site):
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    named = nav_pages(config["nav"])
    assert len(named) == len(set(named)), "a page is named twice in the nav"
    for page in named:
        assert (SITE_DOCS / page).is_file(), f"mkdocs.yml's nav names {page}, which docs/ does not have"
        assert (site / page).with_suffix(".html").is_file(), page
    written = {str(p.relative_to(SITE_DOCS)) for p in SITE_DOCS.rglob("*.md") if "hooks" not in p.parts}
    assert written == set(named), f"pages outside the nav: {sorted(written - set(named))}"


def test_the_home_page_lists_every_page_of_the_nav():
    """docs/index.md is the one page list in prose (the README links to it): it cannot fall behind the nav."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = set(re.findall(r"\]\(([\w/.-]+\.md)(?:#[\w-]*)?\)", (SITE_DOCS / "index.md").read_text(encoding="utf-8")))
    assert listed == set(nav_pages(config["nav"])) - {"index.md"}


def test_every_command_has_a_reference_entry(site):
    """As sqlite-utils checks its CLI reference: every command, lazy ones included, has its heading."""
    page = (site / "reference" / "commands.html").read_text(encoding="utf-8")
    paths = [path for path, _ in reference_hook().command_paths()]
    assert len(paths) > 50 and "preflab import rankings" in paths and "preflab self-reward run" in paths
    missing = [path for path in paths if f'id="{path.replace(" ", "-")}"' not in page]
    assert not missing, f"docs/reference/commands.html has no entry for {missing}"
    # Each entry is the command's own help: its first line and its usage.
    for path, command in reference_hook().command_paths():
        assert html.escape(path, quote=False) in page
        first = (command.help or "").strip().splitlines()[0]
        assert html.escape(first.split("`")[0].strip(), quote=False) in page, (path, first)


def test_every_table_the_migrations_create_has_its_reference(site, cli, db_url):
    from sqlalchemy import create_engine, inspect

    cli("db", "upgrade")
    engine = create_engine(db_url)
    tables = set(inspect(engine).get_table_names()) - {"alembic_version"}
    engine.dispose()
    page = (site / "reference" / "database.html").read_text(encoding="utf-8")
    assert {"rankings", "ranking_items", "comparisons", "engine_requests"} <= tables
    missing = sorted(t for t in tables if f'id="{t}"' not in page)
    assert not missing, f"docs/reference/database.md does not describe {missing}"
    # The comments beside the columns come through: `ranking_items.tier` says what 0 means.
    assert "0 = best" in page or "0 is best" in page


def test_every_environment_variable_the_code_reads_is_documented(site):
    sources = [p for folder in source_folders() for p in (ROOT / folder).rglob("*.py")]
    named = set()
    for path in sources:
        named |= set(re.findall(r'"((?:PREFLAB|OPENAI|LABEL_STUDIO|HF)_[A-Z_]+)"', path.read_text(encoding="utf-8")))
    page = (site / "reference" / "configuration.html").read_text(encoding="utf-8")
    assert {"PREFLAB_DATABASE_URL", "LABEL_STUDIO_API_KEY", "HF_TOKEN"} <= named
    missing = sorted(name for name in named if name not in page)
    assert not missing, f"docs/reference/configuration.md does not name {missing}"


def test_the_benchmarks_page_is_bench_readme(site):
    """The Benchmarks page includes bench/README.md as it stands: its table cannot drift from it."""
    page = (site / "project" / "benchmarks.html").read_text(encoding="utf-8")
    readme = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    heading = next(line.lstrip("#").strip() for line in readme.splitlines()[1:] if line.startswith("## "))
    assert html.escape(heading, quote=False) in page


def source_folders() -> list[str]:
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return sorted(set(pyproject["tool"]["setuptools"]["package-dir"].values()) | {"preflab"})
