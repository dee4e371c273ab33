"""Label Studio labelling configurations (XML) that preflab creates projects with.

- `ranking`: the candidates as a List ranked with a Ranker, best at the top.
- `ranking_tiers`: the same with Buckets: ties, and candidates left unranked.
- `pairwise`: two candidates side by side with Pairwise, plus a "Tie" choice.

Each shows the conversation above the candidates: the system prompt set apart, then
every turn with its role (a Paragraphs tag reading the task's `dialogue` messages);
a candidate of several turns shows them with their roles. Long text scrolls inside
its card, and takes its direction (left-to-right or right-to-left) from its letters.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from importlib.resources import files

from preflab.errors import InputError

TEMPLATES = ("ranking", "ranking_tiers", "pairwise")

# The tag names inside the templates that preflab reads results from.
RANKER = "rank"
LIST = "responses"
PAIRWISE = "compare"
# The `to_name` of a Pairwise result preflab writes: the first object the Pairwise compares.
# Label Studio checks predictions with label-studio-sdk's LabelInterface, which knows only
# object tags as targets (not the Pairwise tag's own name, which its editor writes); the
# editor finds a Pairwise result by its from_name, so it shows this one all the same.
PAIRWISE_TARGET = "left"
TIE = "tie"
TIE_VALUE = "Tie"
# The task data field of the turns the templates show (Paragraphs, OpenAI-style messages).
DIALOGUE = "dialogue"


def label_config(name: str) -> str:
    """The XML of template `name`."""
    if name not in TEMPLATES:
        raise InputError(f"unknown template {name!r} (expected one of {', '.join(TEMPLATES)})")
    return (files(__name__) / f"{name}.xml").read_text(encoding="utf-8")


def bucket_names(config: str | None) -> list[str] | None:
    """The Bucket names of a labelling config's Ranker, in order (the tiers, best first).

    None when the config is unknown or has no buckets (a plain ranking).
    """
    if not config or not config.strip():
        return None
    try:
        root = ET.fromstring(config)
    except ET.ParseError:
        return None
    names = [b.get("name") for ranker in root.iter("Ranker") for b in ranker.iter("Bucket") if b.get("name")]
    return names or None


def shows_conversations(config: str | None) -> bool:
    """Whether a labelling config shows a task's conversation (made from a template since conversations)."""
    if not config or not config.strip():
        return False
    try:
        root = ET.fromstring(config)
    except ET.ParseError:
        return False
    return any(tag.get("value") == f"${DIALOGUE}" for tag in root.iter("Paragraphs"))
