"""The data a training run reads: a dataset version from the store, as HF datasets.

A run trains on a recorded dataset version: the one named, else the newest, and
when the comparisons were rebuilt since (or nothing was ever exported) a fresh
export is made first, so training never silently uses stale pairs.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from preflab.db.models import DatasetVersion, PairBuild
from preflab.errors import InputError, NotFound
from preflab.files import shared_mkdtemp
from preflab.settings import data_dir


def find_dataset_version(session: Session, name_or_id: str) -> DatasetVersion:
    query = select(DatasetVersion).where(DatasetVersion.name == name_or_id)
    if name_or_id.isdigit():
        query = select(DatasetVersion).where(or_(DatasetVersion.name == name_or_id,
                                                 DatasetVersion.id == int(name_or_id)))
    version = session.scalars(query.order_by(DatasetVersion.id.desc())).first()
    if version is None:
        raise NotFound(f"there is no dataset version {name_or_id!r}; list them with `preflab stats` or export one")
    return version


def resolve_dataset_version(session: Session, name_or_id: str | None = None) -> tuple[DatasetVersion, bool]:
    """The named dataset version, else the newest one, exporting first when it is out of date.

    Returns:
        (the version, whether this call exported it). Said here rather than guessed from ids
        afterwards: another command's export, committed meanwhile, is not this run's.
    """
    exported = False
    if name_or_id:
        version = find_dataset_version(session, name_or_id)
    else:
        version = session.scalars(select(DatasetVersion).order_by(DatasetVersion.id.desc())).first()
        build = session.scalars(select(PairBuild).order_by(PairBuild.id.desc())).first()
        if version is None or (build is not None and version.build_id != build.id):
            version, exported = export_for_training(session, version), True
    if not version.path or not Path(version.path).exists():
        where = version.hub_repo or version.path or "nowhere"
        raise NotFound(f"dataset version {version.name} is not on this machine ({where}); "
                       "export it again with `preflab export`")
    return version, exported


def export_for_training(session: Session, previous: DatasetVersion | None) -> DatasetVersion:
    """Export the current comparisons, with the previous export's split settings if any."""
    from preflab.db.export.dataset import ExportSettings, export_dataset

    settings = ExportSettings()
    if previous is not None:
        kept = previous.settings or {}
        settings = ExportSettings(format=previous.format if previous.format in ("disk", "parquet", "jsonl") else "disk",
                                  test_size=kept.get("test_size", 0.1), seed=kept.get("seed", 0),
                                  conversational=kept.get("conversational", False))
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


def run_test_split(data_dir: str):
    """The held-out split of a run's copy of its dataset version, or None when it has none."""
    from datasets import load_from_disk

    splits = load_from_disk(data_dir)
    return splits["test"] if "test" in splits else None


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
            split["prompt_id"], split["prompt"], split["chosen"], split["rejected"], margins, weights):
        group = groups.setdefault(prompt_id, {"prompt": prompt, "index": {}, "responses": [], "chosen_index": [],
                                              "rejected_index": [], "margins": [], "weights": []})
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
