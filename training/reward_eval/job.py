"""`train eval` on a reward model or pair ranker: the bench on a dataset version's test split.

`preflab.training.evaluate.evaluate_model_version` reads the store in one short
transaction (the model versions, the split's pair facts: `heldout`), lets the models
score the pairs here with no transaction open (`evaluate_reward`), and writes the
reports into the model versions' metrics in a second one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from preflab.console import SILENT, Reporter
from preflab.db.models import DatasetVersion, ModelVersion
from preflab.errors import ConfigError, InputError
from preflab.training.reward_eval.bench import bench, compare
from preflab.training.reward_eval.pairs import PairFacts, pair_facts
from preflab.training.reward_eval.score import score_split

SCORERS = ("reward", "pair-ranker")


@dataclass(frozen=True)
class Scorer:
    """A model version that scores pairs: its name, kind and saved weights."""

    name: str
    kind: str
    path: str

    @classmethod
    def of(cls, version: ModelVersion) -> Scorer:
        if version.kind not in SCORERS:
            raise ConfigError(
                f"model version {version.name} is a {version.kind} model; --compare takes a reward "
                "model or a pair ranker"
            )
        return cls(version.name, version.kind, version.path)


@dataclass
class RewardEval:
    """What the bench needs from the store, read before any model is loaded."""

    this: Scorer
    other: Scorer | None
    dataset: str
    test: Any  # the dataset version's test split
    facts: PairFacts
    version_id: int  # where the report is stored
    settings: dict | None = None  # the dataset version's: which head of a multi-objective model scores its pairs


def plan_reward_eval(
    session: Session, version: ModelVersion, dataset: DatasetVersion, other: ModelVersion | None = None
) -> RewardEval:
    """The held-out pairs of `dataset` and their facts, for `version` (and `other`, compared on the same pairs).

    Raises:
        InputError: the dataset version has no test split.
        ConfigError: a version that does not score pairs.
    """
    from preflab.training.data import load_splits

    if other is not None and other.id == version.id:
        raise ConfigError(f"--compare names {version.name} itself: name another reward model or pair ranker")
    this, that = Scorer.of(version), Scorer.of(other) if other is not None else None
    splits = load_splits(dataset.path)
    if "test" not in splits or len(splits["test"]) == 0:
        raise InputError(f"dataset version {dataset.name} has no test split to evaluate on")
    return RewardEval(
        this, that, dataset.name, splits["test"], pair_facts(session, splits["test"]), version.id, dataset.settings
    )


def evaluate_reward(
    plan: RewardEval, *, rounds: int = 1000, seed: int = 0, batch_size: int = 32, reporter: Reporter = SILENT
) -> dict[str, Any]:
    """This model's report on the held-out pairs: the numbers `train eval` has always given
    (`heldout_accuracy`…), the bench (`bench`), and, with another model, the paired comparison
    (`compare`: both accuracies, the difference, its interval and p-value).

    The other model's own evaluation is not touched: `train eval OTHER` gives its whole bench.
    """
    scored = []
    for scorer in (plan.this, plan.other):
        if scorer is not None:
            reporter.note(f"scoring the {len(plan.test):,} held-out pairs of {plan.dataset} with {scorer.name}")
            scored.append(score_split(scorer.name, scorer.kind, scorer.path, plan.test, batch_size, plan.settings))
    (verdicts, read), others = scored[0], scored[1:]
    report = {
        "model_version": plan.this.name,
        "kind": plan.this.kind,
        "dataset_version": plan.dataset,
        **verdicts.headline(),
        "bench": bench(verdicts, plan.facts, read, rounds, seed),
    }
    if others:
        report["compare"] = compare(verdicts, others[0][0], plan.facts, rounds, seed)
    return report
