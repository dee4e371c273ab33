"""`preflab ls …`: Label Studio projects, tasks, predictions and annotation sync."""

from __future__ import annotations

from pathlib import Path

import click

from preflab.commands.options import build_config, config_options, echo_result, json_option, pass_settings
from preflab.console import Reporter, plural
from preflab.labelling.active import SelectConfig
from preflab.labelling.selection import PromptSelection
from preflab.labelling.studio.parse import TaskFields
from preflab.settings import Settings
from preflab.templates import TEMPLATES

# The one --project option of every ls command.
project_option = click.option(
    "--project",
    "project_id",
    type=int,
    metavar="ID",
    help="Label Studio project id (default: the only project preflab knows on the server; "
    "for `ls import`, the tasks' own project field).",
)


def _client(settings: Settings):
    from preflab.labelling.studio.client import LabelStudioClient

    # Retries are said on stderr whatever the output format: a wait is never silent.
    return LabelStudioClient.connect(settings.label_studio_url, reporter=Reporter())


def _sessions(settings: Settings):
    from preflab.db.engine import open_sessions

    return open_sessions(settings.database_url)


def _print_sync(what: str, summary, as_json: bool, project) -> None:
    hint = "see what was quarantined with: preflab quarantine list --source label-studio"
    echo_result(
        as_json,
        summary.as_dict() | {"project": project.project_id if project else None},
        lambda: f"{what}: {summary.line()}",
        [hint] if summary.quarantined or summary.still_quarantined else [],
    )


@click.group("ls")
def ls_group():
    """Label Studio: projects, tasks, AI predictions and annotation sync.

    The server is --label-studio-url (or LABEL_STUDIO_URL); the token is read
    from LABEL_STUDIO_API_KEY only.

    Example: preflab ls init --template ranking --title "Rank responses"
    """


@ls_group.command("init")
@click.option(
    "--template",
    type=click.Choice(TEMPLATES),
    default=TEMPLATES[0],
    show_default=True,
    help="ranking: drag into order; ranking_tiers: tiers with ties; pairwise: A/B/tie.",
)
@click.option("--title", required=True, help="Project title.")
@click.option(
    "--annotators-per-task",
    type=int,
    default=3,
    show_default=True,
    help="How many annotators label each task (overlap on every task).",
)
@click.option(
    "--show-predictions",
    is_flag=True,
    help="Show AI predictions to annotators (hidden by default, so they are not anchored).",
)
@click.option("--description", help="Project description shown in Label Studio.")
@click.option(
    "--criterion",
    "criteria",
    multiple=True,
    metavar="NAME",
    help="Rank each task once per criterion (repeat: --criterion helpfulness --criterion harmlessness), "
    "each with its description beside it. Default: one ranking, criterion overall.",
)
@click.option(
    "--criteria-file",
    type=click.Path(dir_okay=False, exists=True),
    help='TOML of criteria descriptions: [helpfulness] description = "…" (built in: helpfulness, '
    "harmlessness, honesty, instruction_following, truthfulness, overall).",
)
@json_option
@pass_settings
def ls_init(
    settings: Settings,
    template,
    title,
    annotators_per_task,
    show_predictions,
    description,
    criteria,
    criteria_file,
    as_json,
):
    """Create a Label Studio project from a preflab template.

    Example: preflab ls init --template ranking_tiers --title "Tiers, round 3" --annotators-per-task 3

    Example: preflab ls init --title "Helpful and safe" --criterion helpfulness --criterion harmlessness
    """
    from preflab.labelling.studio.projects import init_project

    project = init_project(
        _sessions(settings),
        _client(settings),
        template,
        title,
        annotators_per_task,
        show_predictions,
        description,
        criteria=criteria,
        criteria_file=criteria_file,
    )
    data = project.as_dict() | {"criteria": list(criteria) or ["overall"]}
    by = f", ranked by {', '.join(criteria)}" if criteria else ""
    echo_result(as_json, data, lambda: f"created project {project.project_id} ({template}{by}): {data['url']}")


@ls_group.command("push")
@project_option
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the per-task shuffle (and of --select random)."
)
@click.option("--limit", type=int, help="Push at most this many new tasks (a re-run goes on with the next ones).")
@click.option(
    "--gold",
    type=click.Path(dir_okay=False, exists=True),
    help="Gold answers (JSON Lines: prompt, responses, ranking) to store and mix in as gold tasks.",
)
@click.option(
    "--gold-rate",
    type=float,
    metavar="R",
    help="Share of the project's tasks that are gold tasks (default 0.05 with --gold; "
    "without it, the gold answers stored before).",
)
@config_options(PromptSelection, exclude=("limit",))
@config_options(SelectConfig)
@json_option
@pass_settings
def ls_push(settings: Settings, project_id, seed, limit, gold, gold_rate, as_json, **options):
    """Create a task per prompt from the database's candidates (shuffled; idempotent).

    --prompt-id, --split and --source choose the prompts, as for `generate`; --limit
    caps the new tasks. Gold tasks look like every other task: annotators are not told which they are.
    With --select, a strategy chooses which prompts go first (with --limit K, the
    K it rates most worth ranking), and each task stores why it was chosen.

    Example: preflab ls push --project 3 --gold gold.jsonl --gold-rate 0.05

    Example: preflab ls push --project 3 --select uncertainty --reward-model rm-v2 --limit 50

    Example: preflab ls push --project 3 --source import:arena --limit 20
    """
    from preflab.labelling.studio.push import push_tasks

    select = build_config(SelectConfig, options)
    prompts = build_config(PromptSelection, options)
    project, summary = push_tasks(
        _sessions(settings),
        _client(settings),
        project_id,
        seed=seed,
        limit=limit,
        gold=gold,
        gold_rate=gold_rate,
        selection=select,
        prompts=prompts,
        reporter=Reporter(not as_json),
    )
    by = "--select" if select.select and limit is None else "--limit"
    gold_shown = bool(gold or gold_rate is not None)
    data = summary.as_dict() | {"project": project.project_id}
    echo_result(as_json, data, lambda: _pushed_text(summary, project, by, gold_shown))


def _pushed_text(summary, project, by: str, gold: bool) -> str:
    """The tasks created (gold among them, where gold was asked for), and the prompts skipped."""
    waiting = f"; {plural(summary.waiting, 'more task')} left by {by}" if summary.waiting else ""
    gold_line = f", {summary.gold:,} of them gold" if gold else ""
    line = (
        f"created {plural(summary.created, 'task')}{gold_line} in project {project.project_id} "
        f"({summary.existing:,} already there, {summary.adopted:,} recovered{waiting})"
    )
    return f"{line}\n{skipped_line(summary.skipped)}" if summary.skipped else line


def skipped_line(skipped: dict[str, list[int]]) -> str:
    """`skipped 21 prompts: 20 with no candidates (ids 4, 5, 6, …), …`."""
    from preflab.labelling.studio.push import SKIP_REASONS

    def ids(values: list[int]) -> str:
        shown = ", ".join(map(str, values[:5])) + (", …" if len(values) > 5 else "")
        return f"{'id' if len(values) == 1 else 'ids'} {shown}"

    parts = [f"{len(v):,} with {SKIP_REASONS[reason]} ({ids(v)})" for reason, v in skipped.items()]
    total = sum(map(len, skipped.values()))
    return (
        f"skipped {plural(total, 'prompt')}: {', '.join(parts)}; a task needs two or more candidates "
        "(make them with `preflab generate`)"
    )


@ls_group.command("predict")
@project_option
@click.option(
    "--judge",
    help="Only this judge: an AI annotator's name, or the prediction name of one judge's runs by several criteria; "
    "default: every AI judge.",
)
@json_option
@pass_settings
def ls_predict(settings: Settings, project_id, judge, as_json):
    """Upload AI-judge rankings as predictions, model_version = the judge's name.

    Example: preflab ls predict --project 3 --judge judge:pairwise:1f0c2b7a9d3e4c5f:smollm2-135m-instruct
    """
    from preflab.errors import LabelStudioError
    from preflab.labelling.studio.predict import predict

    project, summary = predict(
        _sessions(settings), _client(settings), project_id, judge, reporter=Reporter(not as_json)
    )
    echo_result(
        as_json,
        summary.as_dict() | {"project": project.project_id},
        lambda: (
            f"uploaded {plural(summary.uploaded, 'prediction')} to project {project.project_id} "
            f"({summary.existing:,} already there, {summary.unfit:,} the template cannot show)"
        ),
    )
    if summary.invalid or summary.refused:
        problems = []
        if summary.invalid:
            problems.append(
                f"{plural(summary.invalid, 'prediction')} did not fit the project's labelling config "
                f"and were not sent ({'; '.join(summary.reasons)})"
            )
        if summary.refused:
            problems.append(
                f"Label Studio refused {summary.refused:,} of the "
                f"{plural(summary.uploaded + summary.refused, 'prediction')} sent"
            )
        raise LabelStudioError("; ".join(problems))


@ls_group.command("sync")
@project_option
@click.option("--page-size", type=int, default=100, show_default=True, help="Tasks per request and transaction.")
@config_options(TaskFields)
@json_option
@pass_settings
def ls_sync(settings: Settings, project_id, page_size, as_json, **options):
    """Pull annotations into the database as rankings (incremental, idempotent).

    New annotations become rankings, edited ones supersede their old version,
    deleted ones are marked deleted, skipped ones are recorded without pairs;
    anything unreadable is quarantined with the reason. The field options say
    where prompts and candidates are in the tasks of a project preflab did not create.

    Example: preflab ls sync --project 3
    """
    from preflab.labelling.studio.sync import sync_project

    fields = build_config(TaskFields, options)
    project, summary = sync_project(
        _sessions(settings),
        _client(settings),
        project_id,
        fields=fields,
        page_size=page_size,
        reporter=Reporter(not as_json),
    )
    _print_sync(f"synced project {project.project_id}", summary, as_json, project)


@ls_group.command("import")
@click.argument("path", type=click.Path(dir_okay=False))
@project_option
@click.option(
    "--label-config",
    type=click.Path(dir_okay=False, exists=True),
    help="The project's labelling config (XML), for the order of bucket tiers.",
)
@click.option("--buckets", metavar="B1,B2,…", help="Bucket names, best tier first (instead of --label-config).")
@config_options(TaskFields)
@json_option
@pass_settings
def ls_import(settings: Settings, path, project_id, label_config, buckets, as_json, **options):
    """Import annotations from a Label Studio JSON or JSON_MIN export file (no server needed).

    An annotation is the same one however it arrives: an export of tasks preflab
    pushed shares its rankings with `ls sync`, so importing it after a sync adds
    nothing (as does one of another project with --label-studio-url and --project).
    Exits 3 when every annotation read was quarantined.

    Example: preflab ls import project-3-export.json --items-field answers --text-field text
    """
    from preflab.labelling.studio.export_file import import_export

    project, summary = import_export(
        _sessions(settings),
        path,
        base_url=settings.label_studio_url,
        project_id=project_id,
        fields=build_config(TaskFields, options),
        buckets=[b.strip() for b in buckets.split(",") if b.strip()] if buckets else None,
        label_config=Path(label_config).read_text(encoding="utf-8") if label_config else None,
        reporter=Reporter(not as_json),
    )
    _print_sync(f"imported {Path(path).name}", summary, as_json, project)
    if summary.all_quarantined:  # a wrong file, told apart from a good one by a scheduled import
        from preflab.errors import EXIT_ALL_QUARANTINED

        click.get_current_context().exit(EXIT_ALL_QUARANTINED)


@ls_group.command("connect")
@click.argument("url", required=False)
@project_option
@click.option("--remove", is_flag=True, help="Take preflab's ML backend and webhook off the project instead.")
@json_option
@pass_settings
def ls_connect(settings: Settings, url, project_id, remove, as_json):
    """Register `preflab serve` at URL as the project's ML backend and annotation webhook (idempotent).

    URL is where `preflab serve` listens, as the Label Studio server reaches it. The
    secret is read from PREFLAB_WEBHOOK_SECRET only: Label Studio sends it as the ML
    backend's basic-auth password and in each webhook's X-Preflab-Secret header.
    Re-running updates both; --remove takes both off. On loopback or a private
    network, Label Studio must run with USE_DEFAULT_BANNED_SUBNETS=false.

    Example: PREFLAB_WEBHOOK_SECRET=… preflab ls connect http://127.0.0.1:9090 --project 3
    """
    from preflab.labelling.studio.connect import connect_project

    connection = connect_project(_sessions(settings), _client(settings), url, project_id, remove=remove)
    echo_result(as_json, connection.as_dict(), connection.line, [f"warning: {w}" for w in connection.warnings])
