"""Each held-out pair scored by a saved reward model or pair ranker, as it read its training data.

The split is put in the form the model trained on (`preflab.training.data.for_model`:
an explicit prompt; chat messages through the model's chat template, the prompt's
whole history followed by the reply), so a chat-format pair is scored as
RewardBench scores one: the prompt's messages plus the reply, one sequence per side.

A reward model scores each reply alone; a pair is right when the chosen reply's
score is strictly greater (RewardBench's `chosen > rejected`: a tie is wrong). A pair
ranker reads both replies in one sequence, in both orders; a pair is right when
P(chosen ≻ rejected) > ½, and each order's own verdict is kept, so the bench can
tell whether the position a reply is shown in sways it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Scored:
    """One model's verdict on each pair of a split, in the split's order.

    `gap`: chosen's score minus rejected's (a reward model), or P(chosen ≻ rejected) − ½
    (a pair ranker); the pair is right when it is above 0. `first` and `second`: a pair
    ranker's own-order verdicts, s(chosen, rejected) and s(rejected, chosen) (None for a
    reward model, which never sees two replies together).
    """

    model_version: str
    kind: str
    gap: np.ndarray
    chosen: np.ndarray | None = None
    rejected: np.ndarray | None = None
    first: np.ndarray | None = None
    second: np.ndarray | None = None

    @property
    def right(self) -> np.ndarray:
        return self.gap > 0

    def headline(self) -> dict:
        """The numbers `train eval` has always given: held-out accuracy and the mean gap or probability."""
        n = len(self.gap)
        accuracy = float(self.right.mean()) if n else None
        if self.kind == "pair-ranker":
            probability = self.gap + 0.5
            return {
                "heldout_accuracy": accuracy,
                "heldout_pairs": n,
                "heldout_mean_probability": float(probability.mean()) if n else None,
                "heldout_log_loss": float(-np.log(np.maximum(probability, 1e-12)).mean()) if n else None,
            }
        return {
            "heldout_accuracy": accuracy,
            "heldout_pairs": n,
            "heldout_mean_margin": float(self.gap.mean()) if n else None,
        }


def reply_length(reply) -> int:
    """A reply's length in characters: its text, or the content of all its messages."""
    if isinstance(reply, str):
        return len(reply)
    return sum(len(m["content"]) for m in reply)


def score_split(
    model_version: str, kind: str, path: str, split, batch_size: int = 32, dataset: dict | None = None
) -> tuple[Scored, object]:
    """(the verdicts of the model at `path` on `split`, the split in the form the model read it).

    Args:
        kind: "reward" or "pair-ranker" (a model version's kind).
        dataset: the dataset version's settings: which head of a multi-objective reward model
            scores its pairs (`_by_heads`).
    """
    from preflab.training.data import for_model
    from preflab.training.objectives import head_count

    if kind == "reward" and head_count(path) > 1:
        return _by_heads(model_version, path, split, dataset or {}, batch_size)
    if kind == "pair-ranker":
        from preflab.lm.pair_ranker import load_pair_ranker

        model, tokenizer, settings = load_pair_ranker(path)
        split = for_model(split, tokenizer, "the held-out pairs")
        return _ranked(model_version, model, tokenizer, split, settings["max_length"], batch_size), split
    from preflab.lm.loading import load_sequence_scorer
    from preflab.lm.scoring import pair_rewards

    model, tokenizer = load_sequence_scorer(path)
    split = for_model(split, tokenizer, "the held-out pairs")
    chosen, rejected = map(
        np.array,
        pair_rewards(
            model, tokenizer, list(split["prompt"]), list(split["chosen"]), list(split["rejected"]), batch_size
        ),
    )
    return Scored(model_version, kind, chosen - rejected, chosen=chosen, rejected=rejected), split


def _ranked(model_version: str, model, tokenizer, split, max_length, batch_size: int) -> Scored:
    from preflab.lm.pair_ranker import order_scores, preferences

    first, second = order_scores(
        model, tokenizer, list(split["prompt"]), list(split["chosen"]), list(split["rejected"]), max_length, batch_size
    )
    probability = np.array(preferences(first, second))
    return Scored(model_version, "pair-ranker", probability - 0.5, first=np.array(first), second=np.array(second))


def _by_heads(model_version: str, path: str, split, dataset: dict, batch_size: int) -> tuple[Scored, object]:
    """A multi-objective reward model's verdicts: each pair scored by the head of its criterion (a criteria
    version's `criterion` column, or the version's one criterion), or, on a combined export, by the export's
    own rule over the heads (`preflab.training.objectives`: the pair's two replies are the group; the gap is
    1, 0 or −1).

    Raises:
        InputError: pairs of a criterion the model has no head for, or a version that names neither.
    """
    from preflab.db.export.heads import combine_group, heads_rule
    from preflab.errors import InputError
    from preflab.training.data import for_model
    from preflab.training.objectives import head_scores, load_reward_heads

    model, tokenizer, criteria = load_reward_heads(path)
    split = for_model(split, tokenizer, "the held-out pairs")
    prompts, n = list(split["prompt"]), len(split)
    vectors = head_scores(
        model, tokenizer, prompts + prompts, list(split["chosen"]) + list(split["rejected"]), batch_size
    )
    rule = (dataset.get("combine") or {}).get("rule")
    if "criterion" in split.column_names or dataset.get("criterion"):
        of = list(split["criterion"]) if "criterion" in split.column_names else [dataset["criterion"]] * n
        missing = sorted(set(of) - set(criteria))
        if missing:
            raise InputError(
                f"{model_version} has no head for criterion {missing[0]} (its heads: {', '.join(criteria)})"
            )
        chosen = np.array([vectors[i][criteria.index(c)] for i, c in enumerate(of)])
        rejected = np.array([vectors[n + i][criteria.index(c)] for i, c in enumerate(of)])
    elif rule:
        combined = heads_rule(rule, criteria, model_version)
        pairs = [combine_group(combined, criteria, [vectors[i], vectors[n + i]]) for i in range(n)]
        chosen, rejected = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    else:
        raise InputError(
            f"{model_version} has a head per criterion ({', '.join(criteria)}): evaluate it on a dataset version "
            "of one of them (`export --criterion NAME`), the criteria version it trained on, or a combined "
            "export (`export --combine RULE`), whose rule combines its heads"
        )
    return Scored(model_version, "reward", chosen - rejected, chosen=chosen, rejected=rejected), split
