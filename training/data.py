"""The data a training run reads: a dataset version from the store, as HF datasets.

A run trains on a recorded dataset version: the one named, else the newest, and
when the comparisons were rebuilt since (or nothing was ever exported) a fresh
export is made first, so training never silently uses stale pairs. Exports made
for training are conversational (chat messages).

Training never glues a prompt to its reply. Each run copies its dataset version in
the form its model reads (`prepare_run_data`, `for_model`), and is scored on it in
that form too: a model with a chat template gets messages, which TRL's trainers
render with that template, as generation and the judges do (plain text becomes one
user turn and one assistant turn); a model without one (a base model, such as the
toy worlds' digit models) continues plain text, so it gets the texts of single-message
prompts and replies, and a conversation of several messages stops the run. A version
rendered with `export --chat-template` is for other tools: a run stops on it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session, sessionmaker

from preflab.db.conversation import assistant_turn, shared_prefix, user_turn
from preflab.db.models import DatasetVersion, PairBuild
from preflab.errors import InputError, NotFound
from preflab.files import shared_mkdtemp
from preflab.lm.loading import has_chat_template
from preflab.settings import data_dir


def find_dataset_version(session: Session, name_or_id: str) -> DatasetVersion:
    query = select(DatasetVersion).where(DatasetVersion.name == name_or_id)
    if name_or_id.isdigit():
        query = select(DatasetVersion).where(
            or_(DatasetVersion.name == name_or_id, DatasetVersion.id == int(name_or_id))
        )
    version = session.scalars(query.order_by(DatasetVersion.id.desc())).first()
    if version is None:
        raise NotFound(f"there is no dataset version {name_or_id!r}; list them with `preflab stats` or export one")
    return version


def resolve_dataset_version(
    session: Session, name_or_id: str | None = None, criteria: Sequence[str] = ()
) -> tuple[DatasetVersion, bool]:
    """The named dataset version, else the newest one, exporting first when it is out of date.

    Args:
        criteria: one criterion: a version of its pairs only; several: a criteria version of theirs
            (`preflab.training.criteria`); none: any version.

    Returns:
        (the version, whether this call exported it). Said here rather than guessed from ids
        afterwards: another command's export, committed meanwhile, is not this run's.
    """
    exported = False
    if criteria:
        from preflab.training.criteria import resolve_criteria_version, resolve_criterion_version

        if len(criteria) == 1:
            version, exported = resolve_criterion_version(session, criteria[0], name_or_id)
        else:
            version, exported = resolve_criteria_version(session, criteria, name_or_id)
    elif name_or_id:
        version = find_dataset_version(session, name_or_id)
        if (version.settings or {}).get("criteria"):
            raise InputError(
                f"dataset version {version.name} holds the pairs of several criteria, each for its own head of a "
                "multi-objective reward model (`train reward --criteria`): train on one criterion's pairs or on "
                "a combined export (`preflab export --combine RULE`)"
            )
    else:  # the newest export: a criteria version is a multi-objective run's, not a mixture to train on
        versions = session.scalars(select(DatasetVersion).order_by(DatasetVersion.id.desc()))
        version = next((v for v in versions if not (v.settings or {}).get("criteria")), None)
        build = session.scalars(select(PairBuild).order_by(PairBuild.id.desc())).first()
        if version is None or (build is not None and version.build_id != build.id):
            version, exported = export_for_training(session, version), True
    if not version.path or not Path(version.path).exists():
        where = version.hub_repo or version.path or "nowhere"
        raise NotFound(
            f"dataset version {version.name} is not on this machine ({where}); export it again with `preflab export`"
        )
    return version, exported


def export_for_training(
    session: Session, previous: DatasetVersion | None, criterion: str | None = None
) -> DatasetVersion:
    """Export the current comparisons (of `criterion` only, if given) as conversations, with the previous
    export's split settings if any."""
    from preflab.db.export.dataset import ExportSettings
    from preflab.db.export.job import export_dataset

    settings = ExportSettings(criterion=criterion)
    if previous is not None:
        kept = previous.settings or {}
        settings = ExportSettings(
            format=previous.format if previous.format in ("disk", "parquet", "jsonl") else "disk",
            test_size=kept.get("test_size", 0.1),
            seed=kept.get("seed", 0),
            criterion=criterion,
        )
    exports = data_dir() / "exports"
    exports.mkdir(parents=True, exist_ok=True)
    # The version's name is known only once it is written, so the folder gets a unique name of its own.
    return export_dataset(session, shared_mkdtemp("for-training-", exports), settings)


def load_splits(version_path: str):
    """The export as a DatasetDict with `train` (required) and `test` (may be absent)."""
    from preflab.db.export.dataset import load_export

    dataset = load_export(version_path)
    if "train" not in dataset or len(dataset["train"]) == 0:
        raise InputError(f"the dataset at {version_path} has no training pairs")
    return dataset


def export_settings(version_path: str | Path) -> dict[str, Any]:
    """The settings an export folder records of itself (`preflab.json`); empty for a folder preflab did not write."""
    manifest = Path(version_path) / "preflab.json"
    if not manifest.is_file():
        return {}
    return json.loads(manifest.read_text(encoding="utf-8")).get("settings") or {}


def chat_tokenizer(sessions: sessionmaker[Session], name: str | None):
    """The tokenizer whose chat template `export --chat-template NAME` renders text with (None without NAME).

    NAME is resolved as every --model is: a model version, an embedded name, a path or a hub id.
    """
    from preflab.lm.loading import load_tokenizer
    from preflab.lm.names import resolve_model

    if not name:
        return None
    with sessions.begin() as session:
        _, location, _ = resolve_model(session, name, record=False)
    return load_tokenizer(location)


def for_model(split, tokenizer, where: str = "the dataset", cache_file: str | None = None):
    """`split`'s pairs in the form a model with this tokenizer trains on (see the module's docstring).

    The prompt is made explicit (an implicit one is the longest message prefix that
    chosen and rejected share, up to a user's turn). Returns `split` itself when it
    is in that form already.

    Args:
        where: names the data in an error ("dataset version dataset-3").
        cache_file: where `datasets` writes the converted rows; None: kept in memory.

    Raises:
        InputError: plain text with no prompt column, pairs that share no prompt, or
            conversations of several messages for a model with no chat template.
    """
    if split is None or len(split) == 0:
        return split
    conversational = isinstance(split[0]["chosen"], list)
    explicit = "prompt" in split.column_names
    chat = has_chat_template(tokenizer)
    if explicit and conversational == chat:
        return split
    if not explicit and not conversational:
        raise InputError(
            f"{where} has no `prompt` column, and its plain-text replies cannot be told apart from "
            "their prompts: export it with --prompt explicit"
        )

    def convert(rows: dict[str, list]) -> dict[str, list]:
        out: dict[str, list] = {"prompt": [], "chosen": [], "rejected": []}
        for i, (chosen, rejected) in enumerate(zip(rows["chosen"], rows["rejected"])):
            prompt = rows["prompt"][i] if explicit else None
            if not explicit:
                prompt, chosen, rejected = _explicit(chosen, rejected, where)
            if chat and not conversational:
                prompt, chosen, rejected = user_turn(prompt), assistant_turn(chosen), assistant_turn(rejected)
            elif conversational and not chat:
                prompt, chosen, rejected = (
                    _one(prompt, "user", where),
                    _one(chosen, "assistant", where),
                    _one(rejected, "assistant", where),
                )
            for key, value in (("prompt", prompt), ("chosen", chosen), ("rejected", rejected)):
                out[key].append(value)
        return out

    converted = split.map(
        convert,
        batched=True,
        keep_in_memory=cache_file is None,
        cache_file_name=cache_file,
        desc=f"Preparing {where} for the model",
    )
    return converted.select_columns(["prompt"] + [c for c in converted.column_names if c != "prompt"])


def _explicit(chosen: list, rejected: list, where: str) -> tuple[list, list, list]:
    """(prompt, chosen reply, rejected reply) of two whole conversations: their shared messages up to a user turn."""
    n = shared_prefix(chosen, rejected)
    while n and chosen[n - 1]["role"] != "user":
        n -= 1
    if not n or n == len(chosen) or n == len(rejected):
        raise InputError(
            f"{where} holds a pair whose chosen and rejected conversations share no prompt "
            "(the messages up to a user's turn)"
        )
    return chosen[:n], chosen[n:], rejected[n:]


def _one(turns: list, role: str, where: str) -> str:
    if len(turns) != 1 or turns[0]["role"] != role:
        raise InputError(
            f"the model has no chat template, so it cannot read the conversations of several messages "
            f"in {where}: train a model that has one (a base model reads single-message prompts and "
            "replies, as plain text)"
        )
    return turns[0]["content"]


def prepare_run_data(export_path: str, model_path: str, data_dir: str, name: str) -> None:
    """Copy dataset version `name` (at `export_path`) to a run's `data_dir`, in the form the model reads.

    Raises:
        InputError: a version rendered with a chat template, or data the model cannot read (`for_model`).
    """
    from datasets import DatasetDict

    from preflab.lm.loading import load_tokenizer_for_training

    rendered = export_settings(export_path).get("chat_template")
    if rendered:
        raise InputError(
            f"dataset version {name} is text already rendered with {rendered}'s chat template, for "
            "other tools; training applies the model's own: export a conversational version "
            "(`preflab export`, its default) and train on that"
        )
    splits = load_splits(export_path)
    tokenizer = load_tokenizer_for_training(model_path)
    scratch = Path(data_dir).parent / ".preparing"
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        DatasetDict(
            {
                part: for_model(split, tokenizer, f"dataset version {name}", str(scratch / f"{part}.arrow"))
                for part, split in splits.items()
            }
        ).save_to_disk(data_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_test_split(data_dir: str):
    """The held-out split of a run's copy of its dataset version, or None when it has none."""
    from datasets import load_from_disk

    splits = load_from_disk(data_dir)
    return splits.get("test", None)


def group_by_prompt(split):
    """One row per prompt: its distinct responses and every comparison among them.

    Returns a `datasets.Dataset` with columns prompt, responses, chosen_index,
    rejected_index, margins, weights (the last four aligned, one entry per pair).
    Pairs from several annotators of one prompt stay separate comparisons.
    """
    from datasets import Dataset

    groups: dict[int, dict] = {}
    columns = split.column_names
    weights = split["weight"] if "weight" in columns else [1.0] * len(split)
    margins = split["margin"] if "margin" in columns else [0.0] * len(split)
    for prompt_id, prompt, chosen, rejected, margin, weight in zip(
        split["prompt_id"], split["prompt"], split["chosen"], split["rejected"], margins, weights
    ):
        group = groups.setdefault(
            prompt_id,
            {
                "prompt": prompt,
                "index": {},
                "responses": [],
                "chosen_index": [],
                "rejected_index": [],
                "margins": [],
                "weights": [],
            },
        )
        ids = []
        for response in (chosen, rejected):
            key = repr(response)  # chat messages are lists: key them by their text form
            if key not in group["index"]:
                group["index"][key] = len(group["responses"])
                group["responses"].append(response)
            ids.append(group["index"][key])
        group["chosen_index"].append(ids[0])
        group["rejected_index"].append(ids[1])
        group["margins"].append(float(margin or 0.0))
        group["weights"].append(float(1.0 if weight is None else weight))
    rows = [{k: v for k, v in g.items() if k != "index"} | {"prompt_id": pid} for pid, g in groups.items()]
    return Dataset.from_list(rows)
