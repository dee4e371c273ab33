"""`train pair-ranker`: a PairRM-style cross-encoder trained on a dataset version's comparisons.

Each comparison (prompt, chosen, rejected) is read in both orders, (chosen,
rejected) and (rejected, chosen), in the same batch, and the loss is the logistic
loss of the antisymmetrised logit s(c, r) − s(r, c) (the model leaf,
`preflab.lm.pair_ranker`): minimising it pushes P(chosen ≻ rejected)
up in either presentation, and P(A ≻ B) = 1 − P(B ≻ A) holds by construction. The
model starts from any causal LM or sequence classifier (a fresh one-label head on
top). The run, its exact config, the held-out pairwise accuracy and a
`pair-ranker` model version are recorded through the same checkpointing runner as
every other training run (`preflab.training.runs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from preflab.lm.loading import load_tokenizer_for_training
from preflab.training.config import TrainConfig
from preflab.training.runs import RunPlan, is_main_process


@dataclass
class PairRankerTrainConfig(TrainConfig):
    """A pairwise ranker (cross-encoder over prompt, A and B) trained on comparisons in both orders."""

    per_device_train_batch_size: int = field(
        default=8, metadata={"help": "Training batch per device, in comparisons (each is read in both orders)."}
    )
    max_length: int | None = field(
        default=1024,
        metadata={
            "help": "Longest tokenized prompt + both responses; longer inputs keep the prompt's end and cut the two "
            "responses alike (in training and when judging)."
        },
    )

    def to_trainer_args(self, output_dir: str):
        from transformers import TrainingArguments

        kwargs = self.trainer_kwargs(output_dir)
        kwargs.pop("max_length")  # preflab's, not the Trainer's
        # The collator needs the two tokenized orders, which the model's forward does not name.
        return TrainingArguments(remove_unused_columns=False, **kwargs)


def tokenize_pairs(split, tokenizer, max_length: int | None, name: str = "train"):
    """Each comparison as its two sequences: (prompt, chosen, rejected) and (prompt, rejected, chosen)."""
    from preflab.lm.pair_ranker import pair_ids

    columns = split.column_names

    def encode(row):
        forward, forward_end = pair_ids(tokenizer, row["prompt"], row["chosen"], row["rejected"], max_length)
        swapped, swapped_end = pair_ids(tokenizer, row["prompt"], row["rejected"], row["chosen"], max_length)
        return {
            "forward_ids": forward,
            "forward_a_end": forward_end,
            "swapped_ids": swapped,
            "swapped_a_end": swapped_end,
            "pair_weight": float(1.0 if row.get("weight") is None else row["weight"]),
        }

    return split.map(encode, remove_columns=columns, desc=f"Tokenizing {name} pairs")


@dataclass
class PairCollator:
    """A batch of B comparisons as 2B right-padded rows: the B forward orders, then the B swapped ones."""

    pad_token_id: int

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        from preflab.lm.scoring import _right_pad

        rows = [e["forward_ids"] for e in examples] + [e["swapped_ids"] for e in examples]
        ids, mask = _right_pad(rows, self.pad_token_id)
        a_end = [e["forward_a_end"] for e in examples] + [e["swapped_a_end"] for e in examples]
        return {
            "input_ids": ids,
            "attention_mask": mask,
            "a_end": torch.tensor(a_end, dtype=torch.long),
            "pair_weight": torch.tensor([e["pair_weight"] for e in examples], dtype=torch.float),
        }


def pair_ranker_loss(scores, weights):
    """Weighted mean of −log σ(s(c, r) − s(r, c)) over a batch's comparisons; also those logits.

    Args:
        scores: s of the batch's 2B rows, the B forward orders first.
    """
    import torch.nn.functional as F

    n = weights.shape[0]
    logits = scores[:n] - scores[n:]
    weights = weights.to(scores.dtype)
    return (-F.logsigmoid(logits) * weights).sum() / weights.sum().clamp_min(1e-12), logits


def build_pair_ranker_trainer(plan: RunPlan, config: PairRankerTrainConfig):
    from datasets import load_from_disk
    from transformers import AutoModelForSequenceClassification, Trainer

    from preflab.lm.pair_ranker import pair_logits

    class PairRankerTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            scores = pair_logits(model, inputs["input_ids"], inputs["attention_mask"], inputs["a_end"])
            loss, logits = pair_ranker_loss(scores, inputs["pair_weight"])
            return (loss, {"logits": logits}) if return_outputs else loss

    tokenizer = load_tokenizer_for_training(plan.model_path)
    model = AutoModelForSequenceClassification.from_pretrained(plan.model_path, num_labels=1)
    model.config.pad_token_id = tokenizer.pad_token_id
    peft_config = config.peft_config("SEQ_CLS")
    if peft_config is not None:
        from peft import get_peft_model

        model = get_peft_model(model, peft_config)
    train_split = tokenize_pairs(load_from_disk(plan.data_dir)["train"], tokenizer, config.max_length)
    return PairRankerTrainer(
        model=model,
        args=config.to_trainer_args(plan.checkpoint_dir),
        train_dataset=train_split,
        data_collator=PairCollator(tokenizer.pad_token_id),
        processing_class=tokenizer,
    )


def is_conversational(data_dir: str) -> bool:
    """Whether a run's data holds chat messages (the judge then formats candidates as messages too)."""
    from datasets import load_from_disk

    train = load_from_disk(data_dir)["train"]
    return len(train) > 0 and isinstance(train[0]["prompt"], list)


def evaluate_pair_ranker(path: str, split, batch_size: int = 32) -> dict[str, Any]:
    """Held-out numbers of the pair ranker saved at `path`: accuracy, mean P(chosen ≻ rejected), log loss."""
    from preflab.lm.pair_ranker import load_pair_ranker, ranker_accuracy
    from preflab.training.data import for_model

    if split is None or len(split) == 0:
        return {
            "heldout_accuracy": None,
            "heldout_pairs": 0,
            "heldout_mean_probability": None,
            "heldout_log_loss": None,
        }
    model, tokenizer, settings = load_pair_ranker(path)
    split = for_model(split, tokenizer, "the held-out pairs")
    result = ranker_accuracy(model, tokenizer, split, settings["max_length"], batch_size)
    return {
        "heldout_accuracy": result["accuracy"],
        "heldout_pairs": result["pairs"],
        "heldout_mean_probability": result["mean_probability"],
        "heldout_log_loss": result["log_loss"],
    }


def finish(trainer, plan: RunPlan, config: PairRankerTrainConfig) -> dict[str, Any]:
    """Mark the saved model as a pair ranker, with the input format it was trained on (the judge reads it)."""
    from preflab.lm.pair_ranker import write_format

    if is_main_process():
        write_format(plan.model_dir, config.max_length, is_conversational(plan.data_dir))
    return {}


def evaluate_run(plan: RunPlan, config: PairRankerTrainConfig, sessions=None) -> dict[str, Any]:
    """Held-out numbers of a run's saved pair ranker on the run's test split."""
    from preflab.training.data import run_test_split

    return evaluate_pair_ranker(plan.model_dir, run_test_split(plan.data_dir), config.per_device_eval_batch_size)
