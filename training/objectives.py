"""A reward model's scores by criterion, and one order from them by a rule: the export's `--combine` on a model.

A multi-objective reward model (`preflab.training.multihead`) scores a reply once per head:
a vector, one score per criterion (`head_scores`). Where one order is needed (best-of-n's
pick, a judge's ranking, a bench's verdict on a pair), the vectors of a group of candidates
(a prompt's replies) are combined by the export's rules (`preflab.db.export.rules`: mean,
weighted, lexicographic, agree), the way the export combines a prompt's rankings
(`preflab.db.export.heads.combine_scores`):

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

from collections.abc import Sequence
from pathlib import Path

from preflab.errors import ConfigError


def load_reward_heads(path: str | Path, device: str | None = None):
    """(model, tokenizer, criteria) of a saved reward model with one or more heads, in eval mode.

    `criteria` names the heads in order (`config.id2label`); an unnamed single head gives `[]`.
    """
    from transformers import AutoModelForSequenceClassification

    from preflab.lm.loading import default_device, head_names, load_tokenizer, resolve_model_path

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


def head_scores(model, tokenizer, prompts: Sequence, responses: Sequence, batch_size: int = 32) -> list[list[float]]:
    """Each (prompt, response)'s score by every head: one vector per response, in head order.

    Read as `reward_scores` reads a one-head model (the form it trained on, each distinct
    response once, batched by length).
    """
    from preflab.lm.scoring import reward_vectors

    return reward_vectors(model, tokenizer, list(prompts), list(responses), batch_size)
