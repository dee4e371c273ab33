"""What the page may say: pseudonyms, short excerpts, model labels without folders.

The page is meant to be passed around a team, so it carries no names, emails,
secrets or full texts. Every free-form string taken from the store goes through
one of these functions before it reaches the page.
"""

from __future__ import annotations

import re
from pathlib import PurePath

EXCERPT_CHARS = 80
GENERIC = {"model", "final", "adapter", "merged", "weights"}
EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


def redact(text: str) -> str:
    """`text` with anything shaped like an email address replaced."""
    return EMAIL.sub("[email]", text)


def excerpt(text: str | None, limit: int = EXCERPT_CHARS) -> str:
    """The first `limit` characters of `text` on one line, with an ellipsis when cut."""
    if not text:
        return ""
    flat = " ".join(text.split())
    cut = flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"
    return redact(cut)


def model_label(label: str | None) -> str:
    """A model's name as the page shows it: a hub id or model version name, or a local folder's last part.

    Local paths can name a person's home folder, so only their last component is kept.
    """
    if not label:
        return "—"
    if "/" in label and (label.startswith(("/", "~", ".")) or label.count("/") > 1 or "\\" in label):
        path = PurePath(label)
        # A folder named for its role ("model", "checkpoint-500") says more with its parent's name.
        generic = path.name in GENERIC or path.name.startswith("checkpoint")
        label = f"{path.parent.name}/{path.name}" if generic and path.parent.name else path.name or label
    return redact(label)[-60:]
