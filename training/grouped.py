"""Grouped reward-model training: each prompt's K candidates, one forward pass each.

TRL's RewardTrainer runs two sequences per pair, so a prompt with K ranked
candidates costs K·(K−1) forward passes (12 at K=4, 72 at K=9). InstructGPT
instead put all of a prompt's comparisons in one batch element: score the K
candidates once and take the Bradley–Terry loss over every pair among them. This
trainer is TRL's RewardTrainer with three parts replaced: the dataset is grouped
by `prompt_id` and tokenized per candidate, the collator flattens the groups
into one padded batch with pair indices, and `compute_loss` gathers the pairs'
reward differences. Model loading, PEFT, dropout, logging, checkpointing and
distributed training are RewardTrainer's and Trainer's own.

`_prepare_dataset`, `_set_signature_columns_if_needed` and the metric state
`compute_loss` fills are TRL internals: tests/training/test_trl_hooks.py checks
them against the installed TRL, and pyproject.toml bounds trl to that minor version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from transformers.data.data_collator import DataCollatorMixin
from trl import RewardTrainer
from trl.trainer.utils import global_then_local_main_first, pad

from preflab.lm.scoring import sequence_ids
from preflab.training.data import group_by_prompt

GROUP_COLUMNS = ["candidate_ids", "chosen_index", "rejected_index", "margins", "weights"]


@dataclass
class DataCollatorForGroups(DataCollatorMixin):
    """Flatten a batch of prompt groups into one padded batch of candidates.

    Returns `input_ids` and `attention_mask` (one row per candidate), and per pair:
    `chosen_index`/`rejected_index` (rows in that batch), `pair_group` (which
    prompt), `pair_weight` and, when the data has margins, `margin`.
    """

    pad_token_id: int
    pad_to_multiple_of: int | None = None
    use_margin: bool = False
    return_tensors: str = "pt"

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        sequences, chosen, rejected, group, weights, margins = [], [], [], [], [], []
        for g, example in enumerate(examples):
            offset = len(sequences)
            sequences.extend(torch.tensor(ids) for ids in example["candidate_ids"])
            chosen.extend(offset + i for i in example["chosen_index"])
            rejected.extend(offset + i for i in example["rejected_index"])
            group.extend([g] * len(example["chosen_index"]))
            weights.extend(example["weights"])
            margins.extend(example["margins"])
        out = {
            "input_ids": pad(
                sequences,
                padding_value=self.pad_token_id,
                padding_side="right",
                pad_to_multiple_of=self.pad_to_multiple_of,
            ),
            "attention_mask": pad(
                [torch.ones_like(s) for s in sequences],
                padding_value=0,
                padding_side="right",
                pad_to_multiple_of=self.pad_to_multiple_of,
            ),
            "chosen_index": torch.tensor(chosen, dtype=torch.long),
            "rejected_index": torch.tensor(rejected, dtype=torch.long),
            "pair_group": torch.tensor(group, dtype=torch.long),
            "pair_weight": torch.tensor(weights, dtype=torch.float),
        }
        if self.use_margin:
            out["margin"] = torch.tensor(margins, dtype=torch.float)
        return out


def grouped_loss(rewards: torch.Tensor, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean over prompts of each prompt's weighted mean pair loss; also the per-pair reward gaps."""
    gaps = rewards[inputs["chosen_index"]] - rewards[inputs["rejected_index"]]
    logits = gaps - inputs["margin"] if "margin" in inputs else gaps
    weight = inputs["pair_weight"].to(rewards.dtype)
    group = inputs["pair_group"]
    n_groups = int(group.max().item()) + 1
    # InstructGPT's normalisation: a prompt counts once however many pairs it yields.
    loss_sum = rewards.new_zeros(n_groups).index_add(0, group, -F.logsigmoid(logits) * weight)
    weight_sum = rewards.new_zeros(n_groups).index_add(0, group, weight)
    return (loss_sum / weight_sum.clamp_min(1e-12)).mean(), gaps


def prepare_groups(dataset, tokenizer, max_length: int | None, name: str = "train"):
    """Pairs → one row per prompt with each distinct candidate tokenized once.

    A pair with a side longer than `max_length` is dropped (as RewardTrainer
    drops it); a prompt left without pairs is dropped.
    """
    if "prompt_id" not in dataset.column_names:
        raise ValueError("grouped reward training needs a `prompt_id` column to group pairs by prompt")

    def tokenize(group):
        ids = [sequence_ids(tokenizer, group["prompt"], r) for r in group["responses"]]
        keep = [
            i
            for i, (c, r) in enumerate(zip(group["chosen_index"], group["rejected_index"]))
            if max_length is None or (len(ids[c]) <= max_length and len(ids[r]) <= max_length)
        ]
        return {
            "candidate_ids": ids,
            "chosen_index": [group["chosen_index"][i] for i in keep],
            "rejected_index": [group["rejected_index"][i] for i in keep],
            "margins": [group["margins"][i] for i in keep],
            "weights": [group["weights"][i] for i in keep],
        }

    grouped = group_by_prompt(dataset).map(
        tokenize, remove_columns=["prompt", "responses"], desc=f"Tokenizing {name} groups"
    )
    return grouped.filter(lambda g: len(g["chosen_index"]) > 0)


class GroupedRewardTrainer(RewardTrainer):
    """RewardTrainer whose batch elements are prompts (all their pairs), not single pairs.

    Accepts the same preference datasets as RewardTrainer (prompt, chosen,
    rejected, and `prompt_id`; `margin` and `weight` optional). The per-device
    batch size counts prompts.
    """

    _tag_names: ClassVar[list[str]] = ["trl", "reward-trainer", "preflab-grouped"]

    def __init__(
        self,
        model,
        args=None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        use_margin: bool = False,
        **kwargs,
    ):
        if processing_class is None:
            from transformers import AutoTokenizer

            processing_class = AutoTokenizer.from_pretrained(
                model if isinstance(model, str) else model.config._name_or_path
            )
        if processing_class.pad_token is None:
            processing_class.pad_token = processing_class.eos_token
        self.use_margin = use_margin
        kwargs.setdefault(
            "data_collator",
            DataCollatorForGroups(
                pad_token_id=processing_class.pad_token_id,
                pad_to_multiple_of=getattr(args, "pad_to_multiple_of", None),
                use_margin=use_margin,
            ),
        )
        super().__init__(
            model,
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            **kwargs,
        )

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        if "candidate_ids" in dataset.column_names:
            return dataset
        with global_then_local_main_first():
            return prepare_groups(dataset, processing_class, args.max_length, dataset_name)

    def _set_signature_columns_if_needed(self):
        if self._signature_columns is None:
            self._signature_columns = list(GROUP_COLUMNS)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if self.model.training else "eval"
        outputs = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], use_cache=False)
        rewards = outputs.logits.squeeze(-1)
        loss, gaps = grouped_loss(rewards, inputs)
        if self.args.center_rewards_coefficient is not None:
            loss = loss + self.args.center_rewards_coefficient * torch.mean(rewards**2)

        if mode == "train":
            tokens = self.accelerator.gather_for_metrics(inputs["attention_mask"].sum()).sum().item()
            self._total_train_tokens += tokens // self._tp_size
        self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
        with torch.no_grad():
            # Ranks hold different numbers of candidates and pairs, and gathering tensors of unequal
            # sizes breaks the collective: gather fixed-size summaries instead.
            r, g = rewards.detach().float(), gaps.detach().float()
            local = torch.stack(
                [
                    r.min(),
                    r.max(),
                    r.sum(),
                    r.new_tensor(r.numel()),
                    (g > 0).float().sum(),
                    g.sum(),
                    g.new_tensor(g.numel()),
                ]
            )
            every = self.accelerator.gather(local[None]).view(-1, local.numel())
            self._metrics[mode]["min_reward"].append(every[:, 0].min().item())
            self._metrics[mode]["max_reward"].append(every[:, 1].max().item())
            self._metrics[mode]["mean_reward"].append((every[:, 2].sum() / every[:, 3].sum()).item())
            self._metrics[mode]["accuracy"].append((every[:, 4].sum() / every[:, 6].sum()).item())
            self._metrics[mode]["margin"].append((every[:, 5].sum() / every[:, 6].sum()).item())
        return (loss, outputs) if return_outputs else loss
