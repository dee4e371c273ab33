"""Files preflab writes get the modes every other file gets: the umask decides, not the library that wrote them.

Two writers make private files whatever the umask says: `tempfile.mkdtemp` makes
0700 folders, and safetensors (0.8) writes weights to a temporary file, created
0600, and renames it into place (safetensors#782), so `model.safetensors` alone
was `-rw-------` in runs and in the model cache.

This module sits at the bottom with `settings`, `errors` and `console`: it imports
no preflab layer, so the model leaf (`preflab.lm`) and the rest of
training share it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def umask() -> int:
    """The process's umask, read without changing it where Linux shows it."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    current = os.umask(0o022)
    os.umask(current)
    return current


def open_to_umask(folder: str | Path) -> None:
    """Give `folder` and all it holds the modes `mkdir` and `open` give: 0777 and 0666 less the umask.

    Called on what preflab saves (weights, checkpoints, exports), once it is written.
    """
    mask = umask()
    root = Path(folder)
    for path in (root, *root.rglob("*")):
        try:
            if not path.is_symlink():
                path.chmod((0o777 if path.is_dir() else 0o666) & ~mask)
        except FileNotFoundError:  # a checkpoint rotated away meanwhile
            continue


def shared_mkdtemp(prefix: str, dir: str | Path) -> Path:
    """A new folder with a unique name under `dir`, with the umask's mode (mkdtemp's own is 0700).

    For folders whose name is known only once they exist (an export named after it
    is written, a retrain's folder), which other people and processes read.
    """
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=dir))
    folder.chmod(0o777 & ~umask())
    return folder
