"""Label Studio labelling configurations (XML) that preflab creates projects with.

- `ranking`: the candidates as a List ranked with a Ranker, best at the top.
- `ranking_tiers`: the same with Buckets: ties, and candidates left unranked.
- `pairwise`: two candidates side by side with Pairwise, plus a "Tie" choice.

With criteria (`label_config("ranking", criteria)`), the ranking templates rank the
responses once per criterion, a Ranker each (`criteria.py`).

Each shows the conversation above the candidates: the system prompt set apart, then
every turn with its role (a Paragraphs tag reading the task's `dialogue` messages);
a candidate of several turns shows them with their roles. Long text scrolls inside
its card, and takes its direction (left-to-right or right-to-left) from its letters.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from importlib.resources import files

from preflab.errors import InputError

OVERALL = "overall"  # preflab.db.models.OVERALL, without importing the store

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


def label_config(
    name: str, criteria: Sequence[str] | None = None, descriptions: Mapping[str, str] | None = None
) -> str:
    """The XML of template `name`; with `criteria`, a Ranker per criterion, its description above it.

    A description is the one given in `descriptions`, else the built-in one (`criteria.DESCRIPTIONS`).

    No criteria, or only `overall`, is the template as it is: one Ranker named `rank`.
    """
    if name not in TEMPLATES:
        raise InputError(f"unknown template {name!r} (expected one of {', '.join(TEMPLATES)})")
    config = (files(__name__) / f"{name}.xml").read_text(encoding="utf-8")
    if not criteria or list(criteria) == [OVERALL]:
        return config
    from preflab.templates.criteria import described, with_criteria

    if name == "pairwise":
        raise InputError("--criterion needs a ranking template (ranking or ranking_tiers): pairwise has one choice")
    if len(set(criteria)) != len(criteria):
        raise InputError(f"a criterion is named twice: {', '.join(criteria)}")
    return with_criteria(config, list(criteria), described(criteria, descriptions))


def _root(config: str | None) -> ET.Element | None:
    if not config or not config.strip():
        return None
    try:
        return ET.fromstring(config)
    except ET.ParseError:
        return None


def ranker_buckets(config: str | None) -> dict[str, list[str]]:
    """Each Ranker's name -> its Bucket names in order (the tiers, best first; empty for a plain ranking).

    Empty when the config is unknown or has no Ranker.
    """
    root = _root(config)
    if root is None:
        return {}
    return {
        ranker.get("name", ""): [b.get("name") for b in ranker.iter("Bucket") if b.get("name")]
        for ranker in root.iter("Ranker")
    }


def bucket_names(config: str | None) -> list[str] | None:
    """The Bucket names of a labelling config's (first bucket) Ranker, in order (the tiers, best first).

    None when the config is unknown or has no buckets (a plain ranking). preflab's
    templates give every criterion's Ranker the same buckets.
    """
    return next((names for names in ranker_buckets(config).values() if names), None)


def shows_conversations(config: str | None) -> bool:
    """Whether a labelling config shows a task's conversation (made from a template since conversations)."""
    root = _root(config)
    return root is not None and any(tag.get("value") == f"${DIALOGUE}" for tag in root.iter("Paragraphs"))
