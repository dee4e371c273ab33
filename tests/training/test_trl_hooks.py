"""The private TRL and transformers internals preflab's trainers rely on are still there, and still fit.

`preflab.training.grouped.GroupedRewardTrainer` overrides RewardTrainer hooks
that are not public API (`_prepare_dataset`, `_set_signature_columns_if_needed`)
and writes RewardTrainer's private metric state (`_metrics`,
`_total_train_tokens`, `_tp_size`); `preflab.training.runs` swaps Trainer's
printer callbacks. pyproject.toml bounds trl to the minor version these were
checked against. When an upgrade moves one, a test here fails naming it, instead
of grouped training silently dropping columns or logging nothing.
"""

from __future__ import annotations

import inspect
from collections import defaultdict

import pytest

trl = pytest.importorskip("trl")
transformers = pytest.importorskip("transformers")

VERSIONS = f"trl {trl.__version__}, transformers {transformers.__version__}"


def _method(owner, name: str):
    found = inspect.getattr_static(owner, name, None)
    where = f"{owner.__module__}.{owner.__qualname__}.{name}"
    assert found is not None, f"{VERSIONS}: {where} is gone (preflab relies on it)"
    return getattr(owner, name)


def _parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


@pytest.mark.parametrize("name", ["_prepare_dataset", "_set_signature_columns_if_needed", "compute_loss"])
def test_the_hooks_grouped_training_overrides_exist_with_the_same_parameters(name):
    from trl import RewardTrainer

    from preflab.training.grouped import GroupedRewardTrainer

    theirs = _parameters(_method(RewardTrainer, name))
    ours = _parameters(getattr(GroupedRewardTrainer, name))
    assert theirs == ours, (
        f"{VERSIONS}: RewardTrainer.{name}{tuple(theirs)} no longer matches the override {tuple(ours)}"
    )


def test_the_hooks_are_still_called_where_grouped_training_needs_them():
    from transformers import Trainer
    from trl import RewardTrainer

    init = inspect.getsource(RewardTrainer.__init__)
    assert "self._prepare_dataset(train_dataset, processing_class, args," in init, (
        f"{VERSIONS}: RewardTrainer.__init__ no longer tokenizes through "
        "self._prepare_dataset(dataset, processing_class, args, name)"
    )
    assert "self.model.add_model_tags(self._tag_names)" in init, (
        f"{VERSIONS}: RewardTrainer.__init__ no longer tags the model with self._tag_names"
    )
    remove = inspect.getsource(_method(Trainer, "_remove_unused_columns"))
    assert "self._set_signature_columns_if_needed()" in remove and "self._signature_columns" in remove, (
        f"{VERSIONS}: Trainer._remove_unused_columns no longer reads self._signature_columns"
    )
    log = inspect.getsource(_method(RewardTrainer, "log"))
    assert "self._metrics[mode]" in log, f"{VERSIONS}: RewardTrainer.log no longer reports self._metrics"


def test_the_trl_and_transformers_helpers_preflab_imports_take_the_same_arguments():
    from transformers.data.data_collator import DataCollatorMixin
    from transformers.trainer_callback import PrinterCallback, ProgressCallback, TrainerCallback
    from trl.trainer.utils import global_then_local_main_first, pad

    params = _parameters(pad)
    for name in ("padding_value", "padding_side", "pad_to_multiple_of"):
        assert name in params, f"{VERSIONS}: trl.trainer.utils.pad has no {name!r} parameter (it has {params})"
    assert _parameters(global_then_local_main_first) == [], (
        f"{VERSIONS}: trl.trainer.utils.global_then_local_main_first now takes arguments"
    )
    assert "torch_call" in inspect.getsource(DataCollatorMixin.__call__), (
        f"{VERSIONS}: DataCollatorMixin.__call__ no longer dispatches to torch_call"
    )
    for callback in (PrinterCallback, ProgressCallback):
        assert issubclass(callback, TrainerCallback), f"{VERSIONS}: {callback.__name__} is no TrainerCallback"


def test_the_checkpointing_option_exists_under_the_name_preflab_passes():
    import dataclasses

    from transformers import TrainingArguments

    from preflab.training.config import _checkpointing_field

    assert _checkpointing_field() in {f.name for f in dataclasses.fields(TrainingArguments)}


def test_a_grouped_trainer_keeps_its_columns_and_fills_rewardtrainers_metric_state(tmp_path):
    """Built for real on a tiny model: the private state compute_loss writes exists, and a batch survives."""
    import torch
    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForSequenceClassification
    from trl import RewardConfig

    from preflab.training.demos import toy_world as toy
    from preflab.training.grouped import GROUP_COLUMNS, GroupedRewardTrainer

    tokenizer = toy.digit_tokenizer()
    torch.manual_seed(0)
    model = LlamaForSequenceClassification(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=16,
            pad_token_id=tokenizer.pad_token_id,
            num_labels=1,
        )
    )
    rows = [
        {"prompt": "1 2 3 4 =", "chosen": a, "rejected": b, "prompt_id": 0, "margin": 1.0, "weight": 1.0}
        for a, b in (("5 6 7 8", "2 3 4 5"), ("5 6 7 8", "3 4 5 6"), ("2 3 4 5", "3 4 5 6"))
    ]
    args = RewardConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        report_to=[],
        max_length=16,
        per_device_train_batch_size=1,
        disable_tqdm=True,
    )
    trainer = GroupedRewardTrainer(model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
    for name, kind in (("_metrics", dict), ("_total_train_tokens", int), ("_tp_size", int)):
        assert isinstance(getattr(trainer, name, None), kind), (
            f"{VERSIONS}: RewardTrainer no longer sets self.{name} ({kind.__name__}) in __init__"
        )
    assert isinstance(trainer._metrics.get("train"), defaultdict), (
        f"{VERSIONS}: RewardTrainer._metrics is no longer {{'train': defaultdict(list), …}}"
    )

    batch = next(iter(trainer.get_train_dataloader()))
    # Trainer dropped no grouped column (the signature-columns hook was honoured).
    assert {"input_ids", "chosen_index", "rejected_index", "pair_group", "pair_weight"} <= set(batch), set(batch)
    assert batch["input_ids"].shape[0] == 3 and batch["chosen_index"].tolist() == [0, 0, 1]
    assert set(trainer.train_dataset.column_names) == set(GROUP_COLUMNS) | {"prompt_id"}
    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, batch)
    assert torch.isfinite(loss)
    assert set(trainer._metrics["train"]) >= {"num_tokens", "accuracy", "margin", "mean_reward"}
    assert trainer._total_train_tokens == int(batch["attention_mask"].sum())
