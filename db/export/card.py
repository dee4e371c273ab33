"""What an export says of itself: its dataset card (README.md), true for its format and indexable by the
Hub. (The line `preflab export` prints is `preflab.commands.text.export_summary`.)"""

from __future__ import annotations

import json

from preflab.db.export.rules import AGREE, LEXICOGRAPHIC, CombineRule
from preflab.db.models import OVERALL, DatasetVersion

LICENSE_UNKNOWN = "unknown"
# The Hub's task category for preference pairs that train generators (DPO) and reward models.
TASK_CATEGORIES = ("text-generation",)
TAGS = ("preference", "rlhf", "dpo", "reward-modeling", "preflab")
# Where each format's splits lie, relative to the export folder (`disk` is `save_to_disk`'s layout).
DATA_FILES = {"parquet": "data/{split}.parquet", "jsonl": "{split}.jsonl", "disk": "{split}/*.arrow"}
KIND_NAMES = {"human": "people", "ai": "AI judges", "mixed": "aggregates of people and judges"}
ANNOTATORS = {
    "human-first": "people's pairs, and an AI judge's only on prompts no person gave a pair for",
    "human": "people's pairs only",
    "ai": "AI judges' pairs only",
    "any": "every pair, from people and AI judges alike",
}


def size_category(n: int) -> str:
    """The Hub's `size_categories` value for a dataset of n rows."""
    bounds = [
        (1_000, "n<1K"),
        (10_000, "1K<n<10K"),
        (100_000, "10K<n<100K"),
        (1_000_000, "100K<n<1M"),
        (10_000_000, "1M<n<10M"),
        (100_000_000, "10M<n<100M"),
        (1_000_000_000, "100M<n<1B"),
    ]
    return next((name for bound, name in bounds if n < bound), "n>1B")


def _yaml(value) -> str:
    return json.dumps(value)  # JSON strings are valid YAML scalars, quoted where they must be


def dataset_card(version: DatasetVersion, prompts: dict[str, int]) -> str:
    """The Hub dataset card of `version`; `prompts` counts the prompts of each split."""
    settings = version.settings
    splits = [s for s in ("train", "test") if getattr(version, f"n_{s}")]
    lines = [
        "---",
        f"license: {_yaml(settings.get('license', LICENSE_UNKNOWN))}",
        "task_categories:",
        *(f"- {t}" for t in TASK_CATEGORIES),
        "size_categories:",
        f"- {_yaml(size_category(version.n_train + version.n_test))}",
        "tags:",
        *(f"- {t}" for t in TAGS),
        "configs:",
        "- config_name: default",
        # `load_dataset` caches a folder read through these configs by the folder's name and this block alone,
        # not by the files: without a description unique to the content, an export written again to a folder of
        # the same name (in another form, or with other pairs) would be read back from the cache, stale.
        f"  description: {_yaml(f'{version.name}: {form_name(settings)}; content hash {version.content_hash}')}",
        "  data_files:",
    ]
    for s in splits:
        lines += [f"  - split: {s}", f"    path: {_yaml(DATA_FILES[version.format].format(split=s))}"]
    lines += [
        "---",
        "",
        f"# {version.name}",
        "",
        "Pairwise preferences exported by preflab: each row says that `chosen` was preferred",
        "to `rejected` as a response to `prompt`.",
        "",
        *form_lines(settings),
        "| split | pairs | prompts |",
        "|---|---|---|",
        *(f"| {s} | {getattr(version, f'n_{s}'):,} | {prompts.get(s, 0):,} |" for s in ("train", "test")),
        "",
        *_chosen_means(settings),
        *_annotators(settings),
        "## How it was made",
        "",
        f"- pair strategy: `{settings.get('strategy')}`; aggregation: `{settings.get('aggregate')}`;"
        f" rankings expanded: `{settings.get('annotator_kind')}`",
        f"- split by prompt with seed {settings['seed']} and test size {settings['test_size']}"
        " (a prompt's pairs never straddle the splits)",
        f"- form: {form_name(settings)}",
        f"- content hash: `{version.content_hash}`",
    ]
    if version.iteration is not None:
        lines.append(f"- self-rewarding iteration: {version.iteration}")
    lines += [
        "",
        "## Loading it",
        "",
        "```python",
        *_loading(version.format),
        "```",
        "",
        f"Columns: {'`prompt`, ' if settings.get('prompt') != 'implicit' else ''}`chosen`, `rejected`, "
        "`margin` (tier gap, or score gap for judges),",
        "`prompt_id` (group a prompt's comparisons), `weight`, `annotator_kind` (human / ai / mixed),",
        "`annotator` (a stable pseudonym for people; never a name or an email).",
        "",
    ]
    return "\n".join(lines)


MARGINS = {
    LEXICOGRAPHIC: "the normalised Borda gap of the criterion that decided the pair",
    AGREE: "the smallest of the criteria's normalised Borda gaps",
}


def _chosen_means(settings: dict) -> list[str]:
    """The card's section on what `chosen` means: the criterion of the pairs, or the rule that combined several."""
    combine = settings.get("combine")
    if combine:
        rule = CombineRule(combine["name"], tuple(combine["criteria"]), tuple((combine.get("weights") or {}).values()))
        dropped = combine.get("dropped") or {}
        told = (
            f"The rule dropped {sum(dropped.values()):,} candidate pairs that some criterion orders: "
            + ", ".join(f"{n:,} {why}" for why, n in dropped.items())
            + "."
            if dropped
            else "The rule dropped no pair that a criterion orders."
        )
        return [
            '## What "chosen" means',
            "",
            f"The criteria are combined by the rule `{rule.text}`: {rule.describe()}. Each criterion's annotators "
            "of a prompt are combined first, by their mean normalised Borda score (as `pairs build --aggregate "
            "borda`); a pair is of two responses every criterion of the rule ranked, one per prompt and pair of "
            f"responses, and its `margin` is {MARGINS.get(rule.name, 'the gap of the combined scores')}.",
            "",
            told,
            "",
        ]
    criterion = settings.get("criterion")
    if criterion is None:  # exported before criteria, or pairs that did not come from the comparisons table
        return []
    what = " (the one order annotators were asked for)" if criterion == OVERALL else ""
    return ['## What "chosen" means', "", f"`chosen` was preferred by the criterion `{criterion}`{what}.", ""]


def _annotators(settings: dict) -> list[str]:
    """The card's section on whose pairs these are and how many contradict each other."""
    kept = settings.get("pairs_by_kind")
    if kept is None:  # pairs that did not come from the comparisons table (a self-rewarding iteration)
        return []
    lines = ["## Whose preferences", ""]
    if settings.get("annotators") in ANNOTATORS:
        lines += [f"Annotators: `{settings['annotators']}`: {ANNOTATORS[settings['annotators']]}.", ""]
    lines += ["| annotators | pairs |", "|---|---|"]
    lines += [f"| {KIND_NAMES.get(kind, kind)} | {n:,} |" for kind, n in sorted(kept.items())]
    lines.append("")
    left_out = settings.get("left_out_by_kind") or {}
    if left_out:
        lines += [
            "Left out: "
            + ", ".join(f"{n:,} pairs by {KIND_NAMES.get(k, k)}" for k, n in sorted(left_out.items()))
            + ".",
            "",
        ]
    unpaired = settings.get("unpaired_rankings") or {}
    if unpaired:
        lines += [
            "Rankings that give no pair: " + ", ".join(f"{n:,} {why}" for why, n in sorted(unpaired.items())) + ".",
            "",
        ]
    lines += _excluded(settings)
    n = settings.get("contradicting_pairs", 0)
    if n:
        by_split = settings.get("contradicting_by_split") or {}
        where = ", ".join(f"{by_split[s]:,} in {s}" for s in ("train", "test") if by_split.get(s))
        lines += [
            f"{n:,} pairs contradict another pair of the same prompt (the same two responses in the "
            f"opposite order){f': {where}' if where else ''}. They are annotators who disagree; "
            "`preflab pairs build --aggregate majority` keeps one verdict per pair.",
            "",
        ]
    else:
        lines += ["No pair contradicts another (no prompt has the same two responses in both orders).", ""]
    return lines


def _excluded(settings: dict) -> list[str]:
    """Which annotators `pairs build` left out of these pairs, and why (by pseudonym)."""
    excluded = settings.get("excluded_annotators")
    if excluded is None:  # exported before annotator quality was recorded
        return []
    if not excluded:
        return ["No annotator was left out (see `preflab annotators`).", ""]
    lines = [
        f"Left out {len(excluded)} annotator{'s' if len(excluded) != 1 else ''} flagged by "
        "`preflab annotators` (their rankings gave no pairs):",
        "",
    ]
    lines += [f"- `{pseudonym}`: {'; '.join(reasons)}" for pseudonym, reasons in sorted(excluded.items())]
    return [*lines, ""]


def form_name(settings: dict) -> str:
    """`conversational, explicit prompt`, `plain text`, `plain text in MODEL's chat template, implicit prompt`."""
    if settings.get("conversational"):
        text = "conversational"
    elif settings.get("chat_template"):
        text = f"plain text in {settings['chat_template']}'s chat template"
    else:
        text = "plain text"
    return f"{text}, {settings.get('prompt', 'explicit')} prompt"


def form_lines(settings: dict) -> list[str]:
    """The card's paragraph on the texts' form: what each column holds, and which TRL format it is."""
    implicit = settings.get("prompt") == "implicit"
    if settings.get("conversational"):
        if implicit:
            text = (
                "Form: **conversational, implicit prompt**. `chosen` and `rejected` are whole conversations, "
                "lists of `{role, content}` messages: the shared history, then each reply. There is no `prompt` "
                "column (TRL's implicit-prompt preference format, which it advises for `RewardTrainer`)."
            )
        else:
            text = (
                "Form: **conversational, explicit prompt**. `prompt` is the conversation so far, a list of "
                "`{role, content}` messages ending with the user's turn; `chosen` and `rejected` are the replies "
                "that follow it, as messages (TRL's conversational preference format, which it advises for "
                "`DPOTrainer`). Trainers apply the model's chat template."
            )
    elif settings.get("chat_template"):
        text = (
            f"Form: **plain text rendered with the chat template of {settings['chat_template']}**. "
            + (
                "`chosen` and `rejected` are whole conversations as text."
                if implicit
                else "`prompt` ends with the template's generation prompt; `chosen` and `rejected` are the text that "
                "follows it."
            )
            + " Train only that model's family on it, as the template is already applied."
        )
    else:
        text = (
            "Form: **plain text**. Each prompt is one user message and each reply one assistant message, as "
            "strings, without a chat template (the conversational form, the default, carries the roles)."
        )
    return [text, ""]


def _loading(fmt: str) -> list[str]:
    if fmt == "disk":
        return [
            "# Written by `save_to_disk`: its loader is `load_from_disk`. (`datasets.load_dataset` refuses a",
            "# `save_to_disk` folder of one Dataset and reads this DatasetDict only as loose Arrow files; for",
            "# tools that call `load_dataset`, such as TRL's CLI, export with --format parquet or jsonl.)",
            "from datasets import load_from_disk",
            "",
            'pairs = load_from_disk("path/to/this/folder")',
        ]
    return [
        "# `load_dataset` reads the folder through this card, and so does TRL's CLI, as is:",
        "#   trl dpo --dataset_name path/to/this/folder --model_name_or_path MODEL",
        "from datasets import load_dataset",
        "",
        'pairs = load_dataset("path/to/this/folder")',
    ]
