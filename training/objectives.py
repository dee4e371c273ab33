"""A multi-objective reward model's heads, loaded and scored: one score per criterion for each reply.

`head_scores` gives each reply's vector (`preflab.lm.scoring.reward_vectors`); where one order is needed,
`preflab.db.export.heads` combines a group's vectors by the export's rules, as the export combines rankings.
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
