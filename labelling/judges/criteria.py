"""What a judge is asked to judge by: a criterion and its rubric (`preflab judge score|pairwise --criterion NAME`).

`overall` asks the judge's own prompt, word for word (its identity and rankings stay what they were). Any
other criterion puts its rubric into that prompt: the score judge grades the response on it alone, the
pairwise judge picks the better answer by it alone. Built in:

- UltraFeedback's four aspects (Cui et al., 2023, "UltraFeedback: Boosting Language Models with Scaled AI
  Feedback", arXiv 2310.01377, its annotation rubrics, paraphrased): helpfulness, honesty,
  instruction_following, truthfulness;
- harmlessness, as Anthropic's HH-RLHF and PKU-SafeRLHF ask it (Bai et al., 2022; Ji et al., 2024).

They are the descriptions annotators see beside each criterion's ranker in Label Studio
(`preflab.templates.criteria.DESCRIPTIONS`): one rubric for people and judges.

Your own come from a TOML file (`--criteria-file`), one table per criterion:

    [concision]
    description = "Which reply says what is needed in the fewest words, leaving nothing out."

The rankings a judge writes carry its criterion, and its description is stored with the criterion.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from preflab.db.ingest.records import criterion_name
from preflab.db.models import OVERALL
from preflab.errors import ConfigError, Invalid
from preflab.labelling.criteria import read_criteria_file
from preflab.templates.criteria import DESCRIPTIONS

# The built-in rubrics: the descriptions annotators see in Label Studio (`preflab.templates.criteria`).
BUILT_IN = {name: text for name, text in DESCRIPTIONS.items() if name != OVERALL}


@dataclass
class CriterionConfig:
    """The criterion a judge judges by: its options (`--criterion`, `--criteria-file`)."""

    criterion: str = field(
        default=OVERALL,
        metadata={
            "help": "Judge by one criterion: overall (the judge's own prompt), helpfulness, honesty, "
            "instruction_following, truthfulness (UltraFeedback's aspects), harmlessness, or one of "
            "--criteria-file. The rankings carry it."
        },
    )
    criteria_file: str | None = field(
        default=None,
        metadata={"help": 'A TOML file of your own criteria: [name] with description = "the rubric".'},
    )

    def __post_init__(self) -> None:
        try:
            criterion_name(self.criterion, "--criterion")
        except Invalid as exc:
            raise ConfigError(str(exc)) from None
        if self.criterion != OVERALL and self.criterion not in self.rubrics():
            known = ", ".join(sorted({OVERALL, *self.rubrics()}))
            raise ConfigError(f"no rubric for the criterion {self.criterion!r}: give one of {known}")

    def rubrics(self) -> dict[str, str]:
        """The rubrics known: the built-in ones and the file's (which win)."""
        return {**BUILT_IN, **(read_criteria_file(self.criteria_file) if self.criteria_file else {})}

    def rubric(self) -> str | None:
        """The rubric of the criterion judged by; None for `overall` (the judge's own prompt)."""
        return None if self.criterion == OVERALL else self.rubrics()[self.criterion]

    def identity(self) -> dict[str, str]:
        """What the criterion adds to a judge's identity: nothing for `overall`, else its name and rubric's hash."""
        rubric = self.rubric()
        if rubric is None:
            return {}
        return {"criterion": self.criterion, "rubric_sha256": hashlib.sha256(rubric.encode()).hexdigest()[:16]}


# What `CriterionConfig.identity` adds to a judge's identity: the same judge asked about another criterion differs by
# these alone (`identity.same_judge`).
CRITERION_KEYS = frozenset(("criterion", "rubric_sha256"))


def score_prompt(template: str, criterion: str, rubric: str | None) -> str:
    """The score judge's prompt `template` asked about one criterion: the rubric first, the scale as it was.

    The template is filled in (`str.format`) afterwards, so the rubric's own braces are escaped.
    """
    if rubric is None:
        return template
    head = (
        f"Judge the response by one criterion only, {criterion}, and by nothing else.\n{rubric}\n"
        "Award the points below for how well the response meets that criterion.\n\n"
    )
    return head.replace("{", "{{").replace("}", "}}") + template


def pairwise_system(system: str, criterion: str, rubric: str | None) -> str:
    """The pairwise judge's system prompt asked about one criterion: the better answer by it alone."""
    if rubric is None:
        return system
    asked = (
        "Choose the assistant that follows the user's instructions and answers the user's question better, "
        "considering helpfulness, relevance, accuracy and level of detail."
    )
    if asked not in system:
        raise ValueError("the pairwise prompt has no sentence naming what is judged to swap")
    return system.replace(
        asked, f"Choose the assistant whose answer is better by one criterion only, {criterion}. {rubric}", 1
    )
