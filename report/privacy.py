"""What the page may say: pseudonyms for people, short excerpts, model and judge labels without folders.

The page is meant to be passed around a team, so it carries no person's name or email,
no secrets and no full texts. People appear by pseudonym only. An AI annotator is no
person: it appears by its name (`judge:pairwise:<run>:openai:judge-b`,
`openbmb/UltraFeedback`), so a reader can tell which judge is which, with
its model's local folders dropped as any model label's are. Every free-form string taken
from the store goes through one of these functions before it reaches the page.
"""

from __future__ import annotations

import re
from pathlib import PurePath

EXCERPT_CHARS = 80
GENERIC = {"model", "final", "adapter", "merged", "weights"}
PANEL = "panel:"  # a panel of judges names its members after this (`labelling.judges.panel.panel_label`)
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
    return _no_folders(label)[-60:]


def _no_folders(label: str) -> str:
    if "/" in label and (label.startswith(("/", "~", ".")) or label.count("/") > 1 or "\\" in label):
        path = PurePath(label)
        # A folder named for its role ("model", "checkpoint-500") says more with its parent's name.
        generic = path.name in GENERIC or path.name.startswith("checkpoint")
        label = f"{path.parent.name}/{path.name}" if generic and path.parent.name else path.name or label
    return redact(label)


def judge_model_label(label: str | None) -> str:
    """A judge's model as the page shows it, whole (the page wraps it): a panel's members each as `model_label`
    shows a model (`panel:openai:judge-a+openai:judge-b`), never cut from the left."""
    if not label:
        return "—"
    if label.startswith(PANEL):
        return PANEL + "+".join(_no_folders(member) for member in label[len(PANEL) :].split("+"))
    return _no_folders(label)


def ai_label(name: str) -> str:
    """An AI annotator's name as the page shows it: whole, with the model it names as `judge_model_label` shows it.

    A judge preflab ran is named `judge:KIND:RUN:MODEL`; an imported one by its import name.
    """
    parts = name.split(":", 3)
    if len(parts) == 4 and parts[0] == "judge":
        return ":".join(parts[:3]) + ":" + judge_model_label(parts[3])
    return judge_model_label(name)


def annotator_label(kind: str, name: str, pseudonym: str) -> str:
    """How the page names an annotator: a person by pseudonym, always; an AI annotator by its name (`ai_label`)."""
    return ai_label(name) if kind == "ai" else pseudonym
