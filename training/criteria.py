"""A run's data by criterion: one criterion's dataset version, or a criteria version for a multi-objective model.

`train reward --criterion NAME` trains on a dataset version of NAME's pairs (`export --criterion NAME`):
the one named, which must be of NAME, else the newest of NAME, exported first when the pairs changed
since (as `resolve_dataset_version` does for a run of the store's one criterion).

`train reward --criteria a,b` trains on a **criteria version**: each criterion's version (resolved as
above) in one dataset whose pairs carry a `criterion` column, recorded as a dataset version of its own
(`criteria-N-<hash>`, its settings naming each criterion's version), so the run, its model version and
`train eval` point at one version. A prompt held out by any criterion is held out by all (its other
pairs move to test, and the prompt's stored split says test): no head trains on a prompt another is
tested on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from preflab.db.bulk import for_values, in_values
from preflab.db.models import DatasetVersion, PairBuild, Prompt
from preflab.errors import InputError
from preflab.files import shared_mkdtemp
from preflab.settings import data_dir

CRITERION = "criterion"  # the column of a criteria version naming each pair's criterion
FORM = ("test_size", "seed", "conversational", "prompt", "chat_template", "license", "annotators")


def version_criterion(version: DatasetVersion) -> str | None:
    """The one criterion a dataset version's pairs are of, as its export recorded it (None: not recorded)."""
    return (version.settings or {}).get(CRITERION)


def version_criteria(version: DatasetVersion) -> dict[str, str]:
    """A criteria version's criteria -> the dataset version of each; empty for any other version."""
    return dict((version.settings or {}).get("criteria") or {})


def holds(version: DatasetVersion) -> str:
    """What a version's pairs are, in words: `criterion helpfulness`, `helpfulness, harmlessness combined by …`."""
    settings = version.settings or {}
    if version_criteria(version):
        return "criteria " + ", ".join(version_criteria(version))
    if settings.get("combine"):
        return f"criteria combined by {settings['combine'].get('rule')}"
    return f"criterion {version_criterion(version)}" if version_criterion(version) else "no recorded criterion"


def resolve_criterion_version(
    session: Session, criterion: str, name_or_id: str | None = None
) -> tuple[DatasetVersion, bool]:
    """(the dataset version of `criterion`'s pairs a run trains on, whether this call exported it).

    Raises:
        InputError: the named version holds other pairs.
    """
    from preflab.training.data import export_for_training, find_dataset_version

    if name_or_id:
        version = find_dataset_version(session, name_or_id)
        if version_criterion(version) != criterion:
            raise InputError(
                f"dataset version {version.name} holds {holds(version)}, not {criterion}: name a version exported "
                f"with --criterion {criterion}, or leave out --dataset-version"
            )
        return version, False
    versions = session.scalars(select(DatasetVersion).order_by(DatasetVersion.id.desc())).all()
    build_id = session.scalar(select(PairBuild.id).order_by(PairBuild.id.desc()).limit(1))
    mine = next((v for v in versions if version_criterion(v) == criterion and not version_criteria(v)), None)
    if mine is not None and (build_id is None or mine.build_id == build_id):
        return mine, False
    return export_for_training(session, versions[0] if versions else None, criterion), True


def resolve_criteria_version(
    session: Session, criteria: Sequence[str], name_or_id: str | None = None
) -> tuple[DatasetVersion, bool]:
    """(the criteria version of `criteria` a multi-objective run trains on, whether this call wrote anything).

    Raises:
        InputError: the named version is no criteria version of exactly these criteria.
    """
    from preflab.training.data import find_dataset_version

    if name_or_id:
        version = find_dataset_version(session, name_or_id)
        if set(version_criteria(version)) != set(criteria):
            raise InputError(
                f"dataset version {version.name} holds {holds(version)}, not criteria {', '.join(criteria)}: "
                "leave out --dataset-version and the run makes one from each criterion's pairs"
            )
        return version, False
    parts, exported = {}, False
    for criterion in criteria:
        parts[criterion], fresh = resolve_criterion_version(session, criterion)
        exported |= fresh
    names = {c: v.name for c, v in parts.items()}
    for version in session.scalars(select(DatasetVersion).order_by(DatasetVersion.id.desc())):
        if version_criteria(version) == names and version.path and Path(version.path).exists():
            return version, exported
    return write_criteria_version(session, parts), True


def write_criteria_version(session: Session, parts: dict[str, DatasetVersion]) -> DatasetVersion:
    """Write the criteria's versions as one dataset with a `criterion` column, and record it (flushed).

    Raises:
        InputError: the versions are written in different forms (one conversational, one not…).
    """
    from datasets import DatasetDict, concatenate_datasets

    from preflab.training.data import load_splits

    loaded = {c: load_splits(v.path) for c, v in parts.items()}
    held_out = {pid for splits in loaded.values() if "test" in splits for pid in splits["test"]["prompt_id"]}
    by_split: dict[str, list] = {"train": [], "test": []}
    moved: set[int] = set()
    for criterion, splits in loaded.items():
        for name, split in splits.items():
            split = split.add_column(CRITERION, [criterion] * len(split))
            if name == "train":
                stays = [i for i, pid in enumerate(split["prompt_id"]) if pid not in held_out]
                goes = [i for i, pid in enumerate(split["prompt_id"]) if pid in held_out]
                moved.update(split.select(goes)["prompt_id"])
                by_split["test"].append(split.select(goes))
                split = split.select(stays)
            by_split[name].append(split)
    try:
        dataset = DatasetDict({name: concatenate_datasets(s) for name, s in by_split.items() if sum(len(p) for p in s)})
    except ValueError:
        raise InputError(
            f"the dataset versions of {', '.join(parts)} ({', '.join(v.name for v in parts.values())}) are "
            "written in different forms: export them alike (`preflab export --criterion NAME`, its default form)"
        ) from None
    exports = data_dir() / "exports"
    exports.mkdir(parents=True, exist_ok=True)
    out = shared_mkdtemp("criteria-", exports)
    dataset.save_to_disk(str(out))
    digest = hashlib.sha256(
        "".join(f"{c}:{parts[c].content_hash};" for c in sorted(parts)).encode() + repr(sorted(moved)).encode()
    ).hexdigest()
    first = parts[next(iter(parts))].settings or {}
    settings: dict[str, Any] = {key: first.get(key) for key in FORM if key in first}
    settings |= {"criteria": {c: v.name for c, v in parts.items()}, "moved_to_test": len(moved)}
    count = session.scalar(select(func.count()).select_from(DatasetVersion)) or 0
    version = DatasetVersion(
        name=f"criteria-{count + 1}-{digest[:8]}",
        build_id=max((v.build_id for v in parts.values() if v.build_id is not None), default=None),
        settings=settings,
        n_train=len(dataset["train"]) if "train" in dataset else 0,
        n_test=len(dataset["test"]) if "test" in dataset else 0,
        n_prompts=len({pid for split in dataset.values() for pid in split["prompt_id"]}),
        content_hash=digest,
        format="disk",
        path=str(out.resolve()),
    )
    session.add(version)
    session.flush()
    if moved:  # as an export stores its prompts' split
        for_values(session, update(Prompt).where(in_values(session, Prompt.id)).values(split="test"), sorted(moved))
    _describe(out, version)
    return version


def _describe(out: Path, version: DatasetVersion) -> None:
    """The folder's manifest (`preflab.json`, as an export writes one) and a short card."""
    manifest = {
        "dataset_version": version.name,
        "content_hash": version.content_hash,
        "counts": {"train": version.n_train, "test": version.n_test},
        "settings": version.settings,
        "format": version.format,
    }
    (out / "preflab.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    parts = "\n".join(f"- `{c}`: dataset version `{name}`" for c, name in version.settings["criteria"].items())
    (out / "README.md").write_text(
        f"# {version.name}\n\nThe pairs of several criteria, each pair naming its own in the `criterion` column, "
        f"for a multi-objective reward model (`preflab train reward --criteria`):\n\n{parts}\n\n"
        f"{version.n_train:,} training pairs and {version.n_test:,} held-out pairs over {version.n_prompts:,} "
        f"prompts; {version.settings['moved_to_test']:,} prompts held out by one criterion were held out by all.\n",
        encoding="utf-8",
    )
