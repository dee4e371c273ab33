"""`train reward --criteria a,b,…`: a multi-objective reward model, one backbone and one head per criterion.

The model is a transformers `AutoModelForSequenceClassification` with `num_labels = K` and
`config.id2label` naming the criteria (head k scores criterion `id2label[k]`), so it loads back
with plain `from_pretrained` and its heads say what they are (`preflab.lm.loading.head_names`). It trains on a
criteria dataset version (`preflab.training.criteria`): every pair carries its `criterion`, and
a pair of criterion k trains head k alone, by Bradley–Terry on that head's gap,
−log σ(r_k(chosen) − r_k(rejected)); the backbone is shared by all of them.

The trainer is transformers' Trainer with the pairwise data, collator and loss of TRL's
RewardTrainer plus each pair's head. TRL's RewardTrainer itself cannot hold it: it loads a
model path with `num_labels=1` and refuses a model given with more. LoRA, checkpoints,
`--resume`, logging and distributed training are the Trainer's, as for every method.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from preflab.training.config import RewardTrainConfig
from preflab.training.runs import RunPlan

PAIR_COLUMNS = ["chosen_ids", "rejected_ids", "head", "margin"]


def tokenize_pairs(split, tokenizer, criteria: Sequence[str], max_length: int | None, use_margin: bool = False):
    """A criteria split as token ids, one row per pair: chosen_ids, rejected_ids, head (and margin).

    Tokenized as TRL's RewardTrainer tokenizes (`preflab.lm.scoring.sequence_ids`); a pair with a
    side longer than `max_length` is dropped, as it drops one.
    """
    from preflab.lm.scoring import sequence_ids

    index = {name: k for k, name in enumerate(criteria)}

    def tokenize(row):
        out = {
            "chosen_ids": sequence_ids(tokenizer, row["prompt"], row["chosen"]),
            "rejected_ids": sequence_ids(tokenizer, row["prompt"], row["rejected"]),
            "head": index[row["criterion"]],
        }
        if use_margin:
            out["margin"] = float(row.get("margin") or 0.0)
        return out

    kept = split.filter(lambda row: row["criterion"] in index, desc="Choosing the heads' pairs")
    tokenized = kept.map(tokenize, remove_columns=kept.column_names, desc="Tokenizing the pairs")
    if max_length is None:
        return tokenized
    return tokenized.filter(lambda row: max(len(row["chosen_ids"]), len(row["rejected_ids"])) <= max_length)


def _collator_class():
    from trl.trainer.reward_trainer import DataCollatorForPreference

    @dataclass
    class DataCollatorForHeads(DataCollatorForPreference):
        """TRL's preference collator (chosen rows, then rejected rows, padded), with each pair's head."""

        def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
            import torch

            out = super().torch_call(examples)
            out["head"] = torch.tensor([example["head"] for example in examples], dtype=torch.long)
            return out

    return DataCollatorForHeads


def head_loss(logits, head, margin=None, center: float | None = None):
    """Bradley–Terry on each pair's own head, as RewardTrainer's loss on one head: (mean loss, the pairs' gaps).

    Args:
        logits: (2·pairs, K): the chosen sequences' scores, then the rejected ones'.
        head: (pairs,) the head of each pair's criterion.
        center: RewardTrainer's `center_rewards_coefficient`: pulls each pair's summed rewards towards 0.
    """
    import torch
    import torch.nn.functional as F

    chosen, rejected = (side.gather(1, head[:, None]).squeeze(1) for side in torch.chunk(logits, 2))
    gaps = chosen - rejected
    loss = -F.logsigmoid(gaps if margin is None else gaps - margin).mean()
    if center is not None:
        loss = loss + center * torch.mean((chosen + rejected) ** 2)
    return loss, gaps


def _trainer_class():
    from transformers import Trainer

    class MultiHeadRewardTrainer(Trainer):
        """A Trainer whose loss is each pair's Bradley–Terry loss on its criterion's head."""

        def _set_signature_columns_if_needed(self):
            if self._signature_columns is None:
                self._signature_columns = list(PAIR_COLUMNS)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            outputs = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], use_cache=False)
            loss, _ = head_loss(
                outputs.logits, inputs["head"], inputs.get("margin"), self.args.center_rewards_coefficient
            )
            return (loss, outputs) if return_outputs else loss

    return MultiHeadRewardTrainer


def reward_heads_model(model_path: str, criteria: Sequence[str], seed: int):
    """The starting model with a fresh score head per criterion, named in its config."""
    from transformers import AutoModelForSequenceClassification, set_seed

    set_seed(seed)  # the heads are drawn at random: from the run's seed
    return AutoModelForSequenceClassification.from_pretrained(
        model_path,
        num_labels=len(criteria),
        id2label=dict(enumerate(criteria)),
        label2id={name: k for k, name in enumerate(criteria)},
    )


def build_multihead_trainer(plan: RunPlan, config: RewardTrainConfig):
    """The Trainer of a multi-objective run: its criteria dataset version's training pairs, one head per criterion."""
    from datasets import load_from_disk
    from trl.trainer.utils import disable_dropout_in_model, global_then_local_main_first

    from preflab.lm.loading import load_tokenizer_for_training

    criteria = config.criteria_names
    args = config.to_trl(plan.checkpoint_dir)
    tokenizer = load_tokenizer_for_training(plan.model_path)
    model = reward_heads_model(plan.model_path, criteria, config.seed)
    model.config.pad_token_id = tokenizer.pad_token_id
    if args.disable_dropout:  # as RewardTrainer does by default
        disable_dropout_in_model(model)
    peft = config.peft_config("SEQ_CLS")
    if peft is not None:
        from peft import get_peft_model

        model = get_peft_model(model, peft)
    with global_then_local_main_first():  # one process writes the tokenized cache, the others read it
        train = tokenize_pairs(
            load_from_disk(plan.data_dir)["train"], tokenizer, criteria, config.max_length, config.use_margin
        )
    collator = _collator_class()(pad_token_id=tokenizer.pad_token_id)
    return _trainer_class()(
        model=model, args=args, train_dataset=train, data_collator=collator, processing_class=tokenizer
    )


def evaluate_heads(path: str, split, batch_size: int = 32) -> dict[str, Any]:
    """Each head's held-out accuracy on its own criterion's pairs of a criteria `split`, and over them all.

    Returns:
        `heldout_accuracy`, `heldout_pairs` and `heldout_mean_margin` over every pair (each scored by
        its criterion's head), `criteria` (the heads, in order), and `heads`: criterion -> the same three.
    """
    from preflab.training.data import for_model
    from preflab.training.objectives import head_scores, load_reward_heads

    model, tokenizer, criteria = load_reward_heads(path)
    gaps: dict[str, list[float]] = {c: [] for c in criteria}
    if split is not None and len(split):
        split = for_model(split, tokenizer, "the held-out pairs")
        prompts, n = list(split["prompt"]), len(split)
        vectors = head_scores(
            model, tokenizer, prompts + prompts, list(split["chosen"]) + list(split["rejected"]), batch_size
        )
        index = {c: k for k, c in enumerate(criteria)}
        for i, criterion in enumerate(split["criterion"]):
            if criterion in index:
                gaps[criterion].append(vectors[i][index[criterion]] - vectors[n + i][index[criterion]])

    def summary(values: list[float]) -> dict[str, Any]:
        n = len(values)
        return {
            "heldout_accuracy": sum(g > 0 for g in values) / n if n else None,
            "heldout_pairs": n,
            "heldout_mean_margin": sum(values) / n if n else None,
        }

    return summary([g for c in criteria for g in gaps[c]]) | {
        "criteria": criteria,
        "heads": {c: summary(gaps[c]) for c in criteria},
    }
