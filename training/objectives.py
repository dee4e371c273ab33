"""A reward model's scores by criterion, and one order from them by a rule: the export's `--combine` on a model.

A multi-objective reward model (`preflab.training.multihead`) scores a reply once per head:
a vector, one score per criterion (`head_scores`). Where one order is needed (best-of-n's
pick, a judge's ranking, a bench's verdict on a pair), the vectors of a group of candidates
(a prompt's replies) are combined by the export's rules (`preflab.db.export.rules`: mean,
weighted, lexicographic, agree), the way the export combines a prompt's rankings
(`combine_scores`):

1. each head's scores make its criterion's tiers: a tier holds the candidates within
   `tie_margin` of its best score (a head learns differences, and a gap that small is no
   verdict: a cost model's two safe replies are equally safe);
2. each criterion's tiers give the candidates their normalised Borda scores;
3. `combine_prompt`, the export's own code, orders the candidates by the rule;
4. a candidate's combined score is its normalised Borda score in that order: 0 … 1, ties equal.

So `lexicographic:harmlessness,helpfulness` picks the most helpful of the safest replies,
and `mean` the reply best on average over the criteria's orders, as in the export.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from pathlib import Path

from preflab.db.export.rules import CombineRule, combine_prompt, parse_rule
from preflab.db.pairs.build import borda
from preflab.errors import ConfigError, InputError

# In reward units: a head less sure than σ(1) ≈ 0.73 that one reply beats another ties them.
TIE_MARGIN = 1.0


def load_reward_heads(path: str | Path, device: str | None = None):
    """(model, tokenizer, criteria) of a saved reward model with one or more heads, in eval mode.

    `criteria` names the heads in order (`config.id2label`); an unnamed single head gives `[]`.
    """
    from transformers import AutoModelForSequenceClassification

    from preflab.lm.loading import default_device, load_tokenizer, resolve_model_path
    from preflab.training.multihead import head_names

    location = resolve_model_path(path)
    try:
        model = AutoModelForSequenceClassification.from_pretrained(location)
    except OSError as exc:
        raise ConfigError(f"cannot load a reward model from {location}: {str(exc).splitlines()[0]}") from None
    tokenizer = load_tokenizer(location)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    model.to(device or default_device())
    model.eval()
    return model, tokenizer, head_names(model.config)


def head_count(path: str | Path) -> int:
    """How many heads the reward model saved at `path` has (its config's `num_labels`), without loading it."""
    from transformers import AutoConfig

    from preflab.lm.loading import resolve_model_path

    return AutoConfig.from_pretrained(resolve_model_path(path)).num_labels


def _vector_model(model):
    """`model` as `preflab.lm.scoring.reward_scores` reads a one-label model, its one value being the vector of
    its heads' scores: it reads `logits[:, 0]` of each batch, so the heads go one axis further in."""
    import torch

    class Heads(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, **inputs):
            out = self.inner(**inputs)
            return type(out)(logits=out.logits[:, None, :])

    return Heads(model)


def head_scores(model, tokenizer, prompts: Sequence, responses: Sequence, batch_size: int = 32) -> list[list[float]]:
    """Each (prompt, response)'s score by every head: one vector per response, in head order.

    Read as `reward_scores` reads a one-head model (the form it trained on, each distinct
    response once, batched by length).
    """
    from preflab.lm.scoring import reward_scores

    return reward_scores(_vector_model(model), tokenizer, list(prompts), list(responses), batch_size)


def heads_rule(text: str, criteria: Sequence[str], model: str = "the reward model") -> CombineRule:
    """The `--combine` rule `text` over a model's heads (`mean` and `agree` without a list: every head).

    Raises:
        InputError: the rule does not parse, or names a criterion the model has no head for.
    """
    rule = parse_rule(text)
    missing = [c for c in rule.criteria if c not in criteria]
    if missing:
        raise InputError(
            f"{rule.text} names criterion {missing[0]!r}, which {model} has no head for "
            f"(its heads: {', '.join(criteria) or 'one, unnamed'})"
        )
    return rule.over(criteria)


def margin_tiers(scores: dict[int, float], margin: float) -> list[list[int]]:
    """Tiers of items by score, best first: each holds the items within `margin` of its best."""
    tiers: list[list[int]] = []
    top = None
    for item, score in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0])):
        if top is not None and top - score <= margin:
            tiers[-1].append(item)
        else:
            tiers.append([item])
            top = score
    return tiers


def combine_group(
    rule: CombineRule, criteria: Sequence[str], vectors: Sequence[Sequence[float]], tie_margin: float = TIE_MARGIN
) -> list[float]:
    """One group's (a prompt's candidates') combined scores under `rule` (over `criteria`, the heads in order).

    Returns:
        Each candidate's normalised Borda score in the rule's order of the group (0.5 for a group of one).
    """
    n = len(vectors)
    if n < 2:
        return [0.5] * n
    column = {name: k for k, name in enumerate(criteria)}
    scores = {
        c: borda([margin_tiers({i: float(v[column[c]]) for i, v in enumerate(vectors)}, tie_margin)])
        for c in rule.criteria
    }
    pairs, _ = combine_prompt(rule, scores)
    wins, losses = [0] * n, [0] * n
    for chosen, rejected, _ in pairs:
        wins[chosen] += 1
        losses[rejected] += 1
    return [(wins[i] + 0.5 * (n - 1 - wins[i] - losses[i])) / (n - 1) for i in range(n)]


def combine_scores(
    rule: CombineRule,
    criteria: Sequence[str],
    vectors: Sequence[Sequence[float]],
    groups: Sequence[Hashable],
    tie_margin: float = TIE_MARGIN,
) -> list[float]:
    """Every candidate's combined score (`combine_group`), each within its group: `groups[i]` is candidate i's
    group (its prompt), and candidates of different groups are never compared."""
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, group in enumerate(groups):
        members[group].append(i)
    out = [0.0] * len(vectors)
    for indices in members.values():
        for i, score in zip(indices, combine_group(rule, criteria, [vectors[i] for i in indices], tie_margin)):
            out[i] = score
    return out
