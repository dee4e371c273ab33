"""The dataset card (README.md) written beside every export."""

from __future__ import annotations

from preflab.db.models import DatasetVersion


def dataset_card(version: DatasetVersion, prompts: dict[str, int]) -> str:
    """The Hub dataset card of `version`; `prompts` counts the prompts of each split."""
    settings = version.settings
    lines = [
        "---",
        "tags: [preference, rlhf, dpo, reward-modeling, preflab]",
        "configs:",
        "- config_name: default",
        "  data_files:",
    ]
    ext = "jsonl" if version.format == "jsonl" else "parquet"
    prefix = "data/" if version.format == "parquet" else ""
    for s in ("train", "test"):
        if getattr(version, f"n_{s}"):
            lines += [f"  - split: {s}", f"    path: {prefix}{s}.{ext}"]
    lines += [
        "---",
        "",
        f"# {version.name}",
        "",
        "Pairwise preferences exported by [preflab](https://pypi.org/project/preflab/): each row says",
        "that `chosen` was preferred to `rejected` as a response to `prompt`.",
        "",
        "| split | pairs | prompts |",
        "|---|---|---|",
        f"| train | {version.n_train:,} | {prompts.get('train', 0):,} |",
        f"| test | {version.n_test:,} | {prompts.get('test', 0):,} |",
        "",
        "## How it was made",
        "",
        f"- pair strategy: `{settings.get('strategy')}`; aggregation: `{settings.get('aggregate')}`;"
        f" annotators: `{settings.get('annotator_kind')}`",
        f"- split by prompt with seed {settings['seed']} and test size {settings['test_size']}"
        " (a prompt's pairs never straddle the splits)",
        f"- conversational format: {'yes' if settings['conversational'] else 'no'}",
        f"- content hash: `{version.content_hash}`",
    ]
    if version.iteration is not None:
        lines.append(f"- self-rewarding iteration: {version.iteration}")
    lines += [
        "",
        "Columns: `prompt`, `chosen`, `rejected`, `margin` (tier gap, or score gap for judges),",
        "`prompt_id` (group a prompt's comparisons), `weight`, `annotator_kind` (human / ai / mixed),",
        "`annotator` (a stable pseudonym for people; never a name or an email).",
        "",
    ]
    return "\n".join(lines)
