"""A wheel built from the checkout holds every module, and every command runs from it.

setuptools installs only the packages `pyproject.toml` lists, mapped from the
top-level folders by `package-dir`. An editable install hides a package missing
from that list (it reads the folders), so this test builds a real wheel from the
tracked files, installs it alone into a fresh virtual environment, imports every
module in the source tree from there and runs every command's `--help`.

The fresh environment borrows the dependencies (torch, transformers, …) from the
test run's own environment through a path entry, which does not process that
environment's `.pth` files: its editable install of preflab stays out of reach.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest
import tomllib

pytestmark = pytest.mark.slow  # measured at a second or more a test: `make check` leaves it out

ROOT = Path(__file__).resolve().parents[1]

CHECK = textwrap.dedent("""
    import importlib, json, sys
    import click
    from click.testing import CliRunner

    modules = json.loads(sys.argv[1])
    failed = {}
    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 (reported below, one line each)
            failed[name] = f"{type(exc).__name__}: {exc}"
            continue
        if not module.__file__.startswith(sys.argv[2]):
            failed[name] = f"imported from {module.__file__}, not from the wheel"

    from preflab.cli import cli

    def walk(group, ctx, path=()):
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            yield path + (name,)
            if isinstance(command, click.Group):
                yield from walk(command, click.Context(command, parent=ctx, info_name=name), path + (name,))

    commands = list(walk(cli, click.Context(cli, info_name="preflab")))
    for path in commands:
        result = CliRunner().invoke(cli, [*path, "--help"])
        if result.exit_code != 0:
            failed[" ".join(path)] = (result.output or repr(result.exception))[-300:]
    print(json.dumps({"failed": failed, "commands": len(commands)}))
""")


def source_modules() -> list[str]:
    """Every module of the source tree under its installed name (Alembic runs the migrations' own scripts)."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
    names = []
    for package, folder in mapping.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if "__pycache__" in path.parts or parts[-1] == "__main__" or "migrations" in parts:
                continue
            names.append(".".join((package, *parts)).removesuffix(".__init__"))
    return sorted(set(names))


def test_a_wheel_holds_every_module_and_runs_every_command(tmp_path):
    source = tmp_path / "source"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_bytes((ROOT / name).read_bytes())
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(source)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("preflab-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert any(n.endswith("preflab/db/migrations/versions/0001_initial.py") for n in archive.namelist())
        assert any(n.endswith("preflab/templates/ranking.xml") for n in archive.namelist())

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    result = subprocess.run(
        [str(python), "-c", CHECK, json.dumps(source_modules()), str(site)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "HF_HUB_OFFLINE": "1",
            "PREFLAB_HOME": str(tmp_path / "home"),
        },
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["failed"] == {}
    assert report["commands"] > 50
