"""Export comparisons as a Hugging Face dataset (prompt / chosen / rejected).

`write_batches` is the one writer: pairs (ids) come in Arrow batches and are
written split by split with pyarrow, so memory stays flat however many pairs
there are. `export_dataset` feeds it the comparisons table (read as Arrow,
`preflab.db.export.arrow`); the self-rewarding loop feeds it an iteration's own pairs
(`write_dataset`). Splits are made by prompt: every pair of a prompt lands
in the same split. Human annotators appear only by their stored pseudonym.

By default the texts are chat messages (TRL's conversational format), the form a
training run reads; plain text holds only single-message prompts and replies, unless
rendered with a model's chat template (`--chat-template`: the caller loads that
tokenizer and hands it in, as this floor imports no model code).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from preflab.db.bulk import for_values, in_values
from preflab.db.export.arrow import arrow_batches
from preflab.db.export.card import LICENSE_UNKNOWN, dataset_card
from preflab.db.export.pair_tables import (
    PairRow,
    TextForm,
    features,
    id_batches,
    id_schema,
    refuse_plain_conversations,
    text_tables,
)
from preflab.db.export.selection import EXPORT_KINDS, kept_comparisons, kept_prompts, pair_mix
from preflab.db.models import Comparison, DatasetVersion, PairBuild, Prompt, Ranking
from preflab.errors import ConfigError, DatabaseError, HubError, InputError

FORMATS = ("disk", "parquet", "jsonl")
SPLITS = ("train", "test")
PROMPT_FORMS = ("explicit", "implicit")
BATCH_ROWS = 20_000


@dataclass
class ExportSettings:
    """How an export is written: its format, and the seeded split of its prompts."""

    format: str = field(
        default="disk",
        metadata={
            "help": "disk: datasets.save_to_disk; parquet: data/{train,test}.parquet; jsonl: {train,test}.jsonl.",
            "choices": FORMATS,
        },
    )
    test_size: float = field(default=0.1, metadata={"help": "Share of prompts in the test split."})
    seed: int = field(default=0, metadata={"help": "Seed of the split by prompt."})
    conversational: bool | None = field(
        default=None,
        metadata={
            "help": "Chat messages, as TRL expects: `prompt` is the conversation so far, `chosen`/`rejected` the "
            "replies (the default, unless --chat-template). --no-conversational: plain text, which holds only "
            "prompts of one user message and replies of one assistant message."
        },
    )
    prompt: str = field(
        default="explicit",
        metadata={
            "help": "explicit: a `prompt` column beside the replies (TRL advises it for DPO); implicit: the prompt "
            "opens `chosen` and `rejected`, which are whole conversations (its advice for reward models).",
            "choices": PROMPT_FORMS,
        },
    )
    chat_template: str | None = field(
        default=None,
        metadata={
            "help": "MODEL: plain text rendered with this model's chat template (a model version, embedded name, "
            "path or hub id), for tools that read text; plain text of a conversation of several messages "
            "needs it."
        },
    )
    annotators: str = field(
        default="human-first",
        metadata={
            "help": "Whose pairs: human-first (people's, and a judge's only on prompts no person ranked, so the "
            "two never contradict), human, ai, or any (every pair `pairs build` made).",
            "choices": EXPORT_KINDS,
        },
    )
    license: str = field(
        default=LICENSE_UNKNOWN,
        metadata={"help": "The dataset's license on its card, as a Hub license id (e.g. cc-by-4.0)."},
    )

    def __post_init__(self) -> None:
        if self.chat_template is not None and not self.chat_template.strip():
            self.chat_template = None  # an empty --chat-template counts as not given
        if self.conversational is None:
            self.conversational = self.chat_template is None
        if self.conversational and self.chat_template:
            raise ConfigError("--chat-template renders plain text; leave out --conversational")
        if self.prompt not in PROMPT_FORMS:
            raise ConfigError(f"unknown --prompt {self.prompt!r} (expected one of {', '.join(PROMPT_FORMS)})")
        if self.prompt == "implicit" and not (self.conversational or self.chat_template):
            raise ConfigError(
                "--prompt implicit as plain text would glue each prompt to its replies: use it with "
                "--conversational (the default) or --chat-template MODEL"
            )
        if self.format not in FORMATS:
            raise ConfigError(f"unknown format {self.format!r} (expected one of {', '.join(FORMATS)})")
        if self.annotators not in EXPORT_KINDS:
            raise ConfigError(f"unknown --annotators {self.annotators!r} (expected one of {', '.join(EXPORT_KINDS)})")
        if not self.license.strip() or any(c.isspace() for c in self.license):
            raise ConfigError(f"--license must be one Hub license id such as cc-by-4.0, got {self.license!r}")
        if not 0 <= self.test_size < 1:
            raise ConfigError(f"--test-size must be in [0, 1), got {self.test_size}")

    def form(self, tokenizer=None) -> TextForm:
        """The texts' form; `tokenizer` (loaded by the caller) renders plain text with --chat-template's template."""
        if self.chat_template and tokenizer is None:
            raise ConfigError(f"--chat-template {self.chat_template}: its tokenizer was not loaded")
        return TextForm(self.conversational, self.prompt == "explicit", tokenizer if self.chat_template else None)

    def stored(self) -> dict[str, Any]:
        """What a dataset version records of its form and split."""
        return {
            "test_size": self.test_size,
            "seed": self.seed,
            "conversational": self.conversational,
            "prompt": self.prompt,
            "chat_template": self.chat_template,
            "license": self.license,
        }


def split_prompts(hashes: dict[int, str], test_size: float, seed: int) -> dict[int, str]:
    """Assign each prompt to train or test: a seeded shuffle by content hash, test first.

    The order depends only on the seed and each prompt's content, so the same
    prompts always split the same way; round(test_size × n) prompts (at least
    one when test_size > 0 and there are two or more prompts) go to test.
    """

    def key(pid: int) -> str:
        return hashlib.sha256(f"{seed}:{hashes[pid]}".encode()).hexdigest()

    order = sorted(hashes, key=key)
    n_test = round(test_size * len(order))
    if test_size > 0 and len(order) >= 2:
        n_test = min(max(n_test, 1), len(order) - 1)
    return {pid: ("test" if i < n_test else "train") for i, pid in enumerate(order)}


class _SplitWriter:
    """Writes one split as JSON Lines, Parquet or an Arrow stream, a batch at a time, and hashes it."""

    def __init__(self, path: Path, fmt: str, form: TextForm):
        self.fmt = fmt
        self.count = 0
        self.prompts: set[int] = set()
        self.digest = hashlib.sha256()
        schema = features(form.conversational, form.explicit)
        self._handle = self._writer = None
        if fmt == "jsonl":
            self._handle = path.open("w", encoding="utf-8")
        elif fmt == "disk":  # Arrow streaming format: what `datasets` memory-maps
            import pyarrow as pa

            self._handle = pa.OSFile(str(path), "wb")
            self._writer = pa.ipc.new_stream(self._handle, schema)
        else:
            import pyarrow.parquet as pq

            self._writer = pq.ParquetWriter(path, schema)

    def write(self, table, identity: bytes) -> None:
        import pyarrow.compute as pc

        self.count += table.num_rows
        self.prompts.update(pc.unique(table.column("prompt_id")).to_pylist())
        self.digest.update(identity)
        if self.fmt == "jsonl":
            text = table.to_pandas().to_json(orient="records", lines=True, force_ascii=False)
            self._handle.write(text if text.endswith("\n") else text + "\n")
        else:
            self._writer.write_table(table)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._handle is not None:
            self._handle.close()


def write_dataset(
    session: Session,
    rows: Iterable[Sequence[PairRow]],
    splits: dict[int, str],
    out_dir: str | Path,
    settings: ExportSettings,
    **version: Any,
) -> DatasetVersion:
    """Write batches of `PairRow` tuples (ids, margin, weight, kind, annotator) as a dataset: see `write_batches`."""
    return write_batches(session, id_batches(rows), splits, out_dir, settings, **version)


def write_batches(
    session: Session,
    batches: Iterable,
    splits: dict[int, str],
    out_dir: str | Path,
    settings: ExportSettings,
    *,
    name: str | None = None,
    prefix: str | None = None,
    build_id: int | None = None,
    version_settings: dict[str, Any] | None = None,
    iteration: int | None = None,
    tokenizer=None,
) -> DatasetVersion:
    """Write batches of pairs to `out_dir` as a dataset, with its card, and record its version (flushed).

    Args:
        batches: Arrow record batches of pairs by id (`id_schema()`).
        splits: prompt id -> "train" or "test", decided by the caller (a prompt missing from it trains).
        name: the version's name; else f"{prefix}-{content hash[:8]}"; else numbered, with the hash.
        version_settings: merged into the settings stored on the version (pair strategy, ...).
        iteration: the self-rewarding iteration the pairs belong to.
        tokenizer: with `settings.chat_template`, the tokenizer whose chat template renders the texts.
    """
    form = settings.form(tokenizer)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".preflab-export-", dir=out_dir))
    try:
        suffix = {"jsonl": "jsonl", "parquet": "parquet", "disk": "arrow"}[settings.format]
        writers = {s: _SplitWriter(staging / f"{s}.{suffix}", settings.format, form) for s in SPLITS}
        # Arrow encodes and compresses without the GIL: write in a second thread while
        # this one reads the next batch from the database.
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = []
            for split, table, identity in text_tables(session, batches, splits, form):
                pending.append(pool.submit(writers[split].write, table, identity))
                if len(pending) > 2:
                    pending.pop(0).result()
            for future in pending:
                future.result()
        for writer in writers.values():
            writer.close()
        counts = {s: writers[s].count for s in SPLITS}
        if not any(counts.values()):
            raise InputError("there are no preference pairs to write")
        digest = hashlib.sha256("".join(writers[s].digest.hexdigest() for s in SPLITS).encode()).hexdigest()
        prompts = {s: len(writers[s].prompts) for s in SPLITS}
        if name is None and prefix is not None:
            name = f"{prefix}-{digest[:8]}"
        if name is None:
            name = f"dataset-{session.scalar(select(func.count()).select_from(DatasetVersion)) + 1}-{digest[:8]}"
        version = DatasetVersion(
            name=name,
            build_id=build_id,
            settings={**settings.stored(), **(version_settings or {})},
            n_train=counts["train"],
            n_test=counts["test"],
            n_prompts=sum(prompts.values()),
            content_hash=digest,
            format=settings.format,
            path=str(out_dir.resolve()),
            iteration=iteration,
        )
        session.add(version)
        session.flush()
        _finish(staging, out_dir, settings, suffix, [s for s in SPLITS if counts[s]])
        (out_dir / "README.md").write_text(dataset_card(version, prompts), encoding="utf-8")
        manifest = {
            "dataset_version": version.name,
            "content_hash": digest,
            "counts": counts,
            "settings": version.settings,
            "format": settings.format,
        }
        if iteration is not None:
            manifest["iteration"] = iteration
        (out_dir / "preflab.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return version


def comparison_batches(session: Session, annotators: str = "any", rows_hint: int = 0) -> Iterator:
    """The comparisons an export of `annotators` keeps, as Arrow batches of ids in build order, streamed.

    Args:
        rows_hint: about how many there are (a big read may go to another process: `preflab.db.export.arrow`).
    """
    query = (
        select(
            Comparison.prompt_id,
            Comparison.chosen_id,
            Comparison.rejected_id,
            Comparison.margin,
            Comparison.weight,
            Comparison.annotator_kind,
            Ranking.annotator_id,
        )
        .outerjoin(Ranking, Ranking.id == Comparison.ranking_id)
        .where(kept_comparisons(annotators))
        .order_by(Comparison.id)
    )
    return arrow_batches(session, query, id_schema(), BATCH_ROWS, rows_hint=rows_hint)


def export_dataset(
    session: Session, out_dir: str | Path, settings: ExportSettings, name: str | None = None, tokenizer=None
) -> DatasetVersion:
    """Write the current comparisons to `out_dir` and record a dataset version; the split is stored per prompt.

    Only the pairs of `settings.annotators` are written; the version's settings
    (and its card) count them by annotator kind, with those left out and those
    that contradict another pair of the same prompt.

    Args:
        tokenizer: with `settings.chat_template`, the tokenizer whose chat template renders the texts.

    Raises:
        InputError: plain text (without a chat template) of conversations of several messages.
    """
    build = session.scalar(select(PairBuild).order_by(PairBuild.id.desc()).limit(1))
    mix = pair_mix(session, settings.annotators)
    if not mix.kept:
        if not mix.left_out:
            raise InputError("there are no comparisons to export; run `preflab pairs build` first")
        held = ", ".join(f"{n:,} {kind}" for kind, n in mix.left_out.items())
        raise InputError(
            f"no pairs to export with --annotators {settings.annotators}: the comparisons hold "
            f"{held} pairs (choose them with --annotators any, human or ai)"
        )
    if not settings.conversational and not settings.chat_template:
        refuse_plain_conversations(session, settings.annotators)
    prompt_hashes = dict(
        session.execute(
            select(Prompt.id, Prompt.content_hash).where(Prompt.id.in_(kept_prompts(settings.annotators)))
        ).all()
    )
    splits = split_prompts(prompt_hashes, settings.test_size, settings.seed)
    by_split = {s: sum(n for pid, n in mix.contradicting.items() if splits.get(pid, "train") == s) for s in SPLITS}
    # The pairs are read before this transaction writes anything, so `arrow_batches` can read
    # them on a second connection.
    version = write_batches(
        session,
        comparison_batches(session, settings.annotators, sum(mix.kept.values())),
        splits,
        out_dir,
        settings,
        name=name,
        tokenizer=tokenizer,
        build_id=build.id if build else None,
        version_settings={
            "strategy": build.strategy if build else None,
            "aggregate": build.aggregate if build else None,
            "annotator_kind": build.annotator_kind if build else None,
            "annotators": settings.annotators,
            **mix.as_dict(),
            "contradicting_by_split": by_split,
            # pseudonym -> why `pairs build` left their rankings out (empty: nobody)
            "excluded_annotators": (build.excluded if build else None) or {},
        },
    )
    # The pairs may be read on a second connection, which sees the latest commit: a pairs build that
    # committed since `pair_mix` counted would leave the version's counts wrong.
    written, counted = version.n_train + version.n_test, sum(mix.kept.values())
    if written != counted:
        raise DatabaseError(
            f"the export read {written:,} pairs where the database counted {counted:,} (a pairs "
            f"build committed meanwhile?); the export was not recorded: run it again"
        )
    # A statement per split and chunk of ids, not one per prompt.
    stored = sum(
        for_values(
            session,
            update(Prompt).where(in_values(session, Prompt.id)).values(split=part),
            [pid for pid, split in splits.items() if split == part],
        )
        for part in SPLITS
    )
    if stored != len(splits):
        raise DatabaseError(
            f"the database stored the split of {stored:,} of the export's {len(splits):,} "
            f"prompts; the export was not recorded"
        )
    return version


def export_and_push(
    sessions: sessionmaker[Session],
    out_dir: str | Path,
    settings: ExportSettings,
    *,
    name: str | None = None,
    hub_repo: str | None = None,
    token: str | None = None,
    tokenizer=None,
) -> DatasetVersion:
    """Export the comparisons, then (with `hub_repo`) push them and record the Hub revision on the version.

    The export is committed before the push, so a failed push keeps it. `tokenizer`:
    with `settings.chat_template`, the tokenizer whose chat template renders the texts.

    Raises:
        HubError: the push failed (the message says the local export was kept).
    """
    with sessions.begin() as session:
        version = export_dataset(session, out_dir, settings, name, tokenizer)
    if hub_repo:
        try:
            revision = push_to_hub(out_dir, hub_repo, token)
        except HubError as exc:
            raise HubError(f"exported dataset version {version.name} to {out_dir}, but {exc}") from None
        with sessions.begin() as session:
            session.execute(
                update(DatasetVersion)
                .where(DatasetVersion.id == version.id)
                .values(hub_repo=hub_repo, hub_revision=revision)
            )
        version.hub_repo, version.hub_revision = hub_repo, revision
    return version


def version_info(version: DatasetVersion) -> dict[str, Any]:
    """What `preflab export --json` prints about a dataset version."""
    info = {
        "id": version.id,
        "name": version.name,
        "path": version.path,
        "format": version.format,
        "train": version.n_train,
        "test": version.n_test,
        "prompts": version.n_prompts,
        "content_hash": version.content_hash,
    }
    kept = version.settings or {}
    for key in (
        "conversational",
        "prompt",
        "chat_template",
        "annotators",
        "pairs_by_kind",
        "left_out_by_kind",
        "contradicting_pairs",
        "contradicting_by_split",
        "excluded_annotators",
    ):
        if key in kept:
            info[key] = kept[key]
    if version.build_id is not None:  # which `pairs build` the pairs came from: the last one before the export
        info["pairs_build"] = {
            "id": version.build_id,
            "strategy": kept.get("strategy"),
            "aggregate": kept.get("aggregate"),
            "annotator_kind": kept.get("annotator_kind"),
        }
    if version.hub_repo:
        info |= {"hub_repo": version.hub_repo, "hub_revision": version.hub_revision}
    return info


def _finish(staging: Path, out_dir: Path, settings: ExportSettings, suffix: str, splits: list[str]) -> None:
    """Move the non-empty staged splits into place (as a `save_to_disk` dataset for `disk`).

    An empty split (say `--test-size 0`) is left out: `datasets` cannot save or
    load a split with no rows, and a user expects a DatasetDict without it.
    """
    if settings.format == "disk":
        from datasets import Dataset, DatasetDict
        from datasets.utils.logging import disable_progress_bar

        disable_progress_bar()
        DatasetDict({s: Dataset.from_file(str(staging / f"{s}.arrow")) for s in splits}).save_to_disk(str(out_dir))
        return
    target = out_dir / "data" if settings.format == "parquet" else out_dir
    target.mkdir(parents=True, exist_ok=True)
    for s in splits:
        shutil.move(str(staging / f"{s}.{suffix}"), target / f"{s}.{suffix}")


def load_export(path: str | Path):
    """Load an export written by `export_dataset` as a `DatasetDict`, whatever its format."""
    from datasets import DatasetDict, load_dataset, load_from_disk

    path = Path(path)
    if (path / "dataset_dict.json").exists():
        return load_from_disk(str(path))
    for folder, ext, builder in ((path / "data", "parquet", "parquet"), (path, "jsonl", "json")):
        files = {s: str(folder / f"{s}.{ext}") for s in SPLITS if (folder / f"{s}.{ext}").exists()}
        if files:
            return DatasetDict(load_dataset(builder, data_files=files))
    raise InputError(f"{path} holds no preflab export")


def push_to_hub(path: str | Path, repo: str, token: str | None, private: bool = True) -> str | None:
    """Push an export to the Hub; returns the commit revision. The token is never echoed."""
    if not token:
        raise HubError("HF_TOKEN is not set; export it to push to the Hugging Face Hub")
    dataset = load_export(path)
    try:
        info = dataset.push_to_hub(repo, token=token, private=private)
    except Exception as exc:  # the Hub client raises many kinds; all mean "not pushed"
        reason = str(exc).replace(token, "***").strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HubError(f"could not push to the Hugging Face Hub repo {repo}: {reason}") from None
    return getattr(info, "oid", None)
