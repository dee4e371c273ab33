"""A Hugging Face dataset of pairs (prompt / chosen / rejected): its settings, its writer, and reading it back.

`write_batches` is the one writer: pairs (ids) come in Arrow batches and are
written split by split with pyarrow, so memory stays flat however many pairs
there are. `preflab.db.export.job` feeds it the comparisons table (read as Arrow,
`preflab.db.export.arrow`); the self-rewarding loop feeds it an iteration's own pairs
(`write_dataset`). Splits are made by prompt: every pair of a prompt lands
in the same split. Human annotators appear only by their stored pseudonym;
`load_export` reads any of the formats back.

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
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from preflab.db.export.card import LICENSE_UNKNOWN, dataset_card
from preflab.db.export.digest import SplitDigest
from preflab.db.export.pair_tables import (
    PairRow,
    TextForm,
    features,
    id_batches,
    text_tables,
)
from preflab.db.export.rules import CombineRule, parse_rule
from preflab.db.export.selection import EXPORT_KINDS
from preflab.db.models import DatasetVersion
from preflab.errors import ConfigError, InputError

FORMATS = ("disk", "parquet", "jsonl")
SPLITS = ("train", "test")
PROMPT_FORMS = ("explicit", "implicit")


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
    criterion: str | None = field(
        default=None,
        metadata={
            "help": "Export the pairs of this criterion only (helpfulness, harmlessness, …). A store whose pairs "
            "hold several criteria needs it or --combine.",
            "metavar": "NAME",
        },
    )
    combine: str | None = field(
        default=None,
        metadata={
            "help": "Combine the criteria into one preference: mean, weighted:helpfulness=0.7,harmlessness=0.3, "
            "lexicographic:harmlessness,helpfulness (the first decides, the next breaks its ties) or agree (only "
            "pairs every criterion gives). Each criterion's annotators are combined first, by Borda.",
            "metavar": "RULE",
        },
    )
    rule: CombineRule | None = field(default=None, init=False, repr=False, compare=False)  # `combine`, parsed

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
        if self.criterion is not None and self.combine is not None:
            raise ConfigError("--criterion exports one criterion and --combine combines several: give one of them")
        self.rule = parse_rule(self.combine) if self.combine is not None else None

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
    """Writes one split as JSON Lines, Parquet or an Arrow stream, a batch at a time, and hashes its pairs.

    The hash is of the pairs, whatever order they were written in (`preflab.db.export.digest`).
    """

    def __init__(self, path: Path, fmt: str, form: TextForm):
        self.fmt = fmt
        self.count = 0
        self.prompts: set[int] = set()
        self.digest = SplitDigest()
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

    def write(self, table, words) -> None:
        import pyarrow.compute as pc

        self.count += table.num_rows
        self.prompts.update(pc.unique(table.column("prompt_id")).to_pylist())
        self.digest.add(words)
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
            for split, table, words in text_tables(session, batches, splits, form):
                pending.append(pool.submit(writers[split].write, table, words))
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
