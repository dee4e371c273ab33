"""`preflab ls …`: Label Studio projects, tasks, predictions and annotation sync."""

from __future__ import annotations

from pathlib import Path

import click

from preflab.console import echo_json, pass_settings
from preflab.settings import Settings


def _client(settings: Settings):
    from preflab.labelling.studio.client import LabelStudioClient

    return LabelStudioClient.connect(settings.label_studio_url)


def _sessions(settings: Settings):
    from preflab.db.engine import open_sessions

    return open_sessions(settings.database_url)


def _fields(prompt_field, items_field, id_field, text_field, pair_fields):
    from preflab.errors import InputError
    from preflab.labelling.studio.parse import TaskFields

    pair = None
    if pair_fields:
        pair = tuple(p.strip() for p in pair_fields.split(","))
        if len(pair) != 2 or not all(pair):
            raise InputError(f"--pair-fields takes two field names separated by a comma, not {pair_fields!r}")
    return TaskFields(prompt_field, items_field, id_field, text_field, pair)


def field_options(command):
    """Where prompts and candidates are in the task data of a project preflab did not create."""
    for option in reversed([
        click.option("--prompt-field", default="prompt", show_default=True, help="Task data field holding the prompt."),
        click.option("--items-field", default="items", show_default=True, help="Task data list of candidates."),
        click.option("--id-field", default="id", show_default=True, help="Candidate id field inside each item."),
        click.option("--text-field", default="body", show_default=True, help="Candidate text field inside each item."),
        click.option("--pair-fields", metavar="LEFT,RIGHT",
                     help="For pairwise projects without an items list: the two task data fields compared."),
    ]):
        command = option(command)
    return command


def _progress(description: str, total: int | None, enabled: bool):
    from preflab.console import Reporter

    return progress_bar(description, total, enabled)


@click.group("ls")
def ls_group():
    """Label Studio: projects, tasks, AI predictions and annotation sync.

    The server is --label-studio-url (or LABEL_STUDIO_URL); the token is read
    from LABEL_STUDIO_API_KEY only.

    Example: preflab ls init --template ranking --title "Rank responses"
    """


@ls_group.command("init")
@click.option("--template", type=click.Choice(["ranking", "ranking_tiers", "pairwise"]), default="ranking",
              show_default=True, help="ranking: drag into order; ranking_tiers: tiers with ties; pairwise: A/B/tie.")
@click.option("--title", required=True, help="Project title.")
@click.option("--annotators-per-task", type=int, default=3, show_default=True,
              help="How many annotators label each task (overlap on every task).")
@click.option("--show-predictions", is_flag=True,
              help="Show AI predictions to annotators (hidden by default, so they are not anchored).")
@click.option("--description", help="Project description shown in Label Studio.")
@click.option("--json", "as_json", is_flag=True, help="Print the project as JSON.")
@pass_settings
def ls_init(settings: Settings, template, title, annotators_per_task, show_predictions, description, as_json):
    """Create a Label Studio project from a preflab template.

    Example: preflab ls init --template ranking_tiers --title "Tiers, round 3" --annotators-per-task 3
    """
    from preflab.labelling.studio.projects import init_project

    client = _client(settings)
    project = init_project(_sessions(settings), client, template, title, annotators_per_task, show_predictions,
                           description)
    if as_json:
        echo_json(project.as_dict())
    else:
        click.echo(f"created project {project.project_id} ({template}): {project.as_dict()['url']}")


@ls_group.command("push")
@click.option("--project", "project_id", type=int, help="Label Studio project id (default: the only one known).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the per-task shuffle.")
@click.option("--limit", type=int, help="Push at most this many new tasks.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@pass_settings
def ls_push(settings: Settings, project_id, seed, limit, as_json):
    """Create a task per prompt from the database's candidates (shuffled; idempotent).

    Example: preflab ls push --project 3
    """
    from preflab.labelling.studio.projects import find_project
    from preflab.labelling.studio.push import plan_tasks, push_tasks

    client = _client(settings)
    sessions = _sessions(settings)
    with sessions.begin() as session:
        project = find_project(session, client.base_url, project_id)
        todo = len(plan_tasks(session, project, seed, limit))
    with _progress("pushing tasks", todo, not as_json) as advance:
        summary = push_tasks(sessions, client, project, seed, limit, progress=advance)
    if as_json:
        echo_json(summary.as_dict() | {"project": project.project_id})
    else:
        click.echo(f"created {summary.created:,} tasks in project {project.project_id} "
                   f"({summary.existing:,} already there, {summary.adopted:,} recovered)")


@ls_group.command("predict")
@click.option("--project", "project_id", type=int, help="Label Studio project id (default: the only one known).")
@click.option("--judge", help="Only this judge (its annotator name); default: every AI judge.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@pass_settings
def ls_predict(settings: Settings, project_id, judge, as_json):
    """Upload AI-judge rankings as predictions, model_version = the judge's name.

    Example: preflab ls predict --project 3 --judge judge:pairwise:1f0c2b7a9d3e4c5f:smollm2-135m-instruct
    """
    from preflab.labelling.studio.predict import predict
    from preflab.labelling.studio.projects import find_project

    client = _client(settings)
    sessions = _sessions(settings)
    with sessions.begin() as session:
        project = find_project(session, client.base_url, project_id)
    summary = predict(sessions, client, project, judge)
    if as_json:
        echo_json(summary.as_dict() | {"project": project.project_id})
    else:
        click.echo(f"uploaded {summary.uploaded:,} predictions to project {project.project_id} "
                   f"({summary.existing:,} already there, {summary.unfit:,} the template cannot show)")


@ls_group.command("sync")
@click.option("--project", "project_id", type=int, help="Label Studio project id (default: the only one known).")
@click.option("--page-size", type=int, default=100, show_default=True, help="Tasks per request and transaction.")
@field_options
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@pass_settings
def ls_sync(settings: Settings, project_id, page_size, prompt_field, items_field, id_field, text_field, pair_fields,
            as_json):
    """Pull annotations into the database as rankings (incremental, idempotent).

    New annotations become rankings, edited ones supersede their old version,
    deleted ones are marked deleted, skipped ones are recorded without pairs;
    anything unreadable is quarantined with the reason.

    Example: preflab ls sync --project 3
    """
    from preflab.labelling.studio.sync import sync_project

    fields = _fields(prompt_field, items_field, id_field, text_field, pair_fields)
    client = _client(settings)
    with _progress("syncing tasks", None, not as_json) as advance:
        project, summary = sync_project(_sessions(settings), client, project_id, fields=fields,
                                        page_size=page_size, progress=advance)
    if as_json:
        echo_json(summary.as_dict() | {"project": project.project_id})
    else:
        click.echo(f"synced project {project.project_id}: {summary.line()}")
        if summary.quarantined:
            click.echo("see what was quarantined with: preflab quarantine list --source label-studio", err=True)


@ls_group.command("import")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--project", "project_id", type=int,
              help="The project the export came from (default: the tasks' project field).")
@click.option("--label-config", type=click.Path(dir_okay=False, exists=True),
              help="The project's labelling config (XML), for the order of bucket tiers.")
@click.option("--buckets", metavar="B1,B2,…", help="Bucket names, best tier first (instead of --label-config).")
@field_options
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@pass_settings
def ls_import(settings: Settings, path, project_id, label_config, buckets, prompt_field, items_field, id_field,
              text_field, pair_fields, as_json):
    """Import annotations from a Label Studio JSON export file (no server needed).

    With --label-studio-url (or LABEL_STUDIO_URL) and --project naming a project
    preflab syncs, the rankings are shared with `ls sync`.

    Example: preflab ls import project-3-export.json --items-field answers --text-field text
    """
    from preflab.labelling.studio.export_file import import_export

    fields = _fields(prompt_field, items_field, id_field, text_field, pair_fields)
    config = Path(label_config).read_text(encoding="utf-8") if label_config else None
    bucket_list = [b.strip() for b in buckets.split(",") if b.strip()] if buckets else None
    sessions = _sessions(settings)
    with _progress("importing tasks", None, not as_json) as advance:
        project, summary = import_export(sessions, path, base_url=settings.label_studio_url, project_id=project_id,
                                         fields=fields, buckets=bucket_list, label_config=config, progress=advance)
    if as_json:
        echo_json(summary.as_dict() | {"project": project.project_id if project else None})
    else:
        click.echo(f"imported {Path(path).name}: {summary.line()}")
        if summary.quarantined:
            click.echo("see what was quarantined with: preflab quarantine list --source label-studio", err=True)
