"""`preflab export`: the comparisons as a dataset version, and its push to the Hugging Face Hub.

`export_dataset` counts what an export keeps (`preflab.db.export.selection`), splits its
prompts, streams the comparisons as Arrow batches of ids (`comparison_batches`) through the
one writer (`preflab.db.export.dataset.write_batches`), and stores each prompt's split;
the pairs are those of one criterion, or (`--combine`) the criteria combined by a rule
(`preflab.db.export.combine`). `export_and_push` commits that export before it pushes it (`push_to_hub`) and
records the Hub revision; `version_info` is what `preflab export --json` prints of a version.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from preflab.db.bulk import for_values, in_values, lookup
from preflab.db.export.arrow import arrow_batches
from preflab.db.export.combine import WITHIN_CRITERION, combined_pairs
from preflab.db.export.dataset import SPLITS, ExportSettings, load_export, split_prompts, write_batches
from preflab.db.export.pair_tables import id_schema, refuse_plain_conversations
from preflab.db.export.rules import DROPPED_REASONS
from preflab.db.export.selection import (
    PairMix,
    held_criteria,
    kept_comparisons,
    kept_prompts,
    pair_mix,
    unpaired,
)
from preflab.db.models import Comparison, DatasetVersion, PairBuild, Prompt, Ranking
from preflab.errors import DatabaseError, HubError, InputError

BATCH_ROWS = 20_000


def comparison_batches(
    session: Session, annotators: str = "any", rows_hint: int = 0, criteria: Sequence[str] = ()
) -> Iterator:
    """The comparisons an export of `annotators` (and `criteria`: empty, all) keeps, as Arrow batches of ids in
    build order, streamed.

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
        .where(kept_comparisons(annotators, criteria))
        .order_by(Comparison.id)
    )
    return arrow_batches(session, query, id_schema(), BATCH_ROWS, rows_hint=rows_hint)


@dataclass
class _Chosen:
    """The pairs an export writes: their prompts, their batches of ids, how many, and what the version records."""

    prompts: dict[int, str]  # prompt id -> content hash
    batches: Iterable
    counted: int
    contradicting: dict[int, int]  # prompt id -> pairs contradicting another
    recorded: dict[str, Any]


def export_dataset(
    session: Session, out_dir: str | Path, settings: ExportSettings, name: str | None = None, tokenizer=None
) -> DatasetVersion:
    """Write the current comparisons to `out_dir` and record a dataset version; the split is stored per prompt.

    Only the pairs of `settings.annotators` are written: of `settings.criterion`, or combined by
    `settings.rule` (`preflab.db.export.combine`), or of the one criterion they hold. The version's
    settings (and its card) count them by annotator kind, with those left out and those that contradict
    another pair of the same prompt, or those the rule dropped.

    Args:
        tokenizer: with `settings.chat_template`, the tokenizer whose chat template renders the texts.

    Raises:
        InputError: no pairs to export; pairs of several criteria and neither --criterion nor --combine; a rule
            naming a criterion the pairs do not hold; plain text (without a chat template) of conversations of
            several messages.
    """
    build = session.scalar(select(PairBuild).order_by(PairBuild.id.desc()).limit(1))
    chosen = _combined(session, settings, build) if settings.rule is not None else _stored(session, settings)
    splits = split_prompts(chosen.prompts, settings.test_size, settings.seed)
    by_split = {s: sum(n for pid, n in chosen.contradicting.items() if splits.get(pid, "train") == s) for s in SPLITS}
    # The pairs are read before this transaction writes anything, so `arrow_batches` can read
    # them on a second connection.
    version = write_batches(
        session,
        chosen.batches,
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
            **chosen.recorded,
            "contradicting_by_split": by_split,
            # pseudonym -> why `pairs build` left their rankings out (empty: nobody)
            "excluded_annotators": (build.excluded if build else None) or {},
        },
    )
    # The pairs may be read on a second connection, which sees the latest commit: a pairs build that
    # committed since `pair_mix` counted would leave the version's counts wrong.
    written, counted = version.n_train + version.n_test, chosen.counted
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


def _nothing_to_export(mix: PairMix, annotators: str, criterion: str | None = None) -> InputError:
    if not mix.left_out:
        return InputError("there are no comparisons to export; run `preflab pairs build` first")
    held = ", ".join(f"{n:,} {kind}" for kind, n in mix.left_out.items())
    return InputError(
        f"no pairs to export with --annotators {annotators}: the comparisons hold "
        f"{held} pairs{f' of criterion {criterion}' if criterion else ''} (choose them with --annotators any, "
        "human or ai)"
    )


def _stored(session: Session, settings: ExportSettings) -> _Chosen:
    """The comparisons `pairs build` wrote, of the export's annotators and of one criterion.

    Raises:
        InputError: no such pairs; or pairs of several criteria and no `settings.criterion` (naming them, and
            the two ways to choose).
    """
    kind, scope = settings.annotators, settings.criterion
    # One pass over the comparisons counts them and finds their criteria.
    mix = pair_mix(session, kind) if scope is None else pair_mix(session, kind, scope)
    if scope is not None and not (mix.kept or mix.left_out) and (stored := held_criteria(session)):
        raise InputError(
            f"there are no pairs of criterion {scope!r} to export: the comparisons hold {', '.join(stored)}"
        )
    if not mix.kept:
        raise _nothing_to_export(mix, kind, scope)
    if len(mix.held) > 1:
        first, second = mix.held[:2]
        raise InputError(
            f"the pairs to export hold {len(mix.held)} criteria ({', '.join(mix.held)}): export one with "
            f"--criterion NAME, or combine them with --combine RULE (mean, weighted:{first}=0.5,{second}=0.5, "
            f"lexicographic:{first},{second} or agree)"
        )
    criteria = (scope,) if scope else ()
    if not settings.conversational and not settings.chat_template:
        refuse_plain_conversations(session, kind, criteria)
    prompts = dict(
        session.execute(select(Prompt.id, Prompt.content_hash).where(Prompt.id.in_(kept_prompts(kind, criteria)))).all()
    )
    counted = sum(mix.kept.values())
    return _Chosen(
        prompts,
        comparison_batches(session, kind, counted, criteria),
        counted,
        mix.contradicting,
        {"criterion": mix.held[0], **mix.as_dict()},
    )


def _combined(session: Session, settings: ExportSettings, build: PairBuild | None) -> _Chosen:
    """The pairs of the rankings the last build took, combined across criteria by `settings.rule`."""
    held = held_criteria(session, settings.annotators)
    if not held:
        raise _nothing_to_export(pair_mix(session, settings.annotators), settings.annotators)
    rule = settings.rule.over(held)
    if not settings.conversational and not settings.chat_template:
        refuse_plain_conversations(session, settings.annotators, rule.criteria)
    combined = combined_pairs(session, rule, settings.annotators, build.strategy if build else "all", BATCH_ROWS)
    dropped = {why: combined.dropped[why] for why in DROPPED_REASONS if combined.dropped[why]}
    if not combined.n:
        reasons = ", ".join(f"{n:,} {why}" for why, n in dropped.items())
        raise InputError(f"--combine {rule.text} leaves no pair to export{f' (dropped: {reasons})' if reasons else ''}")
    prompts = dict(lookup(session, Prompt.__table__, ("id", "content_hash"), "id", sorted(combined.prompts)))
    return _Chosen(
        prompts,
        combined.batches,
        combined.n,
        {},  # one pair per prompt and candidate pair: none contradicts another
        {
            "combine": {**rule.as_dict(), "within_criterion": WITHIN_CRITERION, "dropped": dropped},
            "pairs_by_kind": dict(combined.by_kind),
            "left_out_by_kind": {},
            "contradicting_pairs": 0,
            "unpaired_rankings": unpaired(session, settings.annotators, rule.criteria),
        },
    )


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
        "unpaired_rankings",
        "contradicting_pairs",
        "contradicting_by_split",
        "excluded_annotators",
        "criterion",
        "combine",
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
